/* One rank of a data-parallel training loop, as NVTX ranges: for benchmarks/bench_analyze.py.
 *
 *   rank_workload RANGES STEPS SLOW_NS
 *
 * STEPS steps, each a "step N" range (domain "train") around one "data" range and forward and
 * backward ranges over layers, RANGES ranges in all (about: each step has RANGES/STEPS). The
 * "data" range spins SLOW_NS nanoseconds (a slow input pipeline on one rank), the others
 * are empty. Run under the recorder (NVTX_INJECTION64_PATH=libnvtx_recorder.so,
 * NVTX_TF_RECORD_DIR=DIR) or under nsys.
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_nvtx.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: rank_workload RANGES STEPS SLOW_NS\n");
    return 2;
  }
  long ranges = atol(argv[1]), steps = atol(argv[2]), slow_ns = atol(argv[3]);
  if (ranges < 4 || steps < 1) {
    fprintf(stderr, "rank_workload: RANGES >= 4 and STEPS >= 1\n");
    return 2;
  }
  long per_step = ranges / steps;                      /* step + data + forward + backward + layers */
  long layers = per_step > 4 ? (per_step - 3) / 2 : 1; /* forward ones; backward: one fewer */
  static const char* fwd[] = {"forward/conv", "forward/bn", "forward/relu", "forward/dense"};
  static const char* bwd[] = {"backward/conv", "backward/bn", "backward/relu", "backward/dense"};
  nvtxDomainHandle_t train = nvtxDomainCreateA("train");
  char name[32];
  for (long s = 0; s < steps; ++s) {
    snprintf(name, sizeof(name), "step %ld", s);
    push(train, name);
    push(train, "data");
    for (long long t0 = now_ns(); slow_ns > 0 && now_ns() - t0 < slow_ns;) {
    }
    nvtxDomainRangePop(train);
    push(train, "forward");
    for (long l = 0; l < layers; ++l) {
      push(train, fwd[l % 4]);
      nvtxDomainRangePop(train);
    }
    nvtxDomainRangePop(train);
    push(train, "backward");
    for (long l = 0; l + 1 < layers; ++l) {
      push(train, bwd[l % 4]);
      nvtxDomainRangePop(train);
    }
    nvtxDomainRangePop(train);
    nvtxDomainRangePop(train);
  }
  return 0;
}
