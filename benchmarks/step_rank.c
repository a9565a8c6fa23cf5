/* One rank of issue 47's criterion 3, as NVTX ranges: for benchmarks/bench_watch_aa.py.
 *
 *   step_rank READY GO SECONDS [RANGE FROM PERCENT]
 *
 * Creates the file READY (it is up: its recorder attached), waits for the file GO, then for
 * SECONDS seconds runs steps of about 120 ms: a "step N" range (domain "train") around three
 * ranges, "data" (30 ms), "compute" (60 ms) and "comm" (30 ms), each a sleep. The sleeps are
 * relative, not to a mark: what slows the rank (a CPU taken by another process, a wake-up
 * late) lengthens the range it happens in, as it would a real step's work. With RANGE FROM
 * PERCENT, the range RANGE lasts PERCENT % of a step (120 ms) longer from step FROM on: the
 * rank slowed in one range.
 * Run under `nvtx-tf record`. The same code on every rank: an A/A job.
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_nvtx.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 7) {
    fprintf(stderr, "usage: step_rank READY GO SECONDS [RANGE FROM PERCENT]\n");
    return 2;
  }
  const double seconds = atof(argv[3]);
  const char* slow = argc == 7 ? argv[4] : "";
  const long from = argc == 7 ? atol(argv[5]) : 0;
  const long long extra = argc == 7 ? (long long)(atof(argv[6]) / 100.0 * 120e6) : 0;
  static const char* names[3] = {"data", "compute", "comm"};
  static const long long lengths[3] = {30000000LL, 60000000LL, 30000000LL};
  nvtxDomainHandle_t train = nvtxDomainCreateA("train");
  if (ready_then_go(argv[1], argv[2])) return 1;
  const long long end = now_ns() + (long long)(seconds * 1e9);
  char name[32];
  for (long s = 0; now_ns() < end; ++s) {
    snprintf(name, sizeof(name), "step %ld", s);
    push(train, name);
    for (int k = 0; k < 3; ++k) {
      push(train, names[k]);
      sleep_ns(lengths[k] + (s >= from && strcmp(names[k], slow) == 0 ? extra : 0));
      nvtxDomainRangePop(train);
    }
    nvtxDomainRangePop(train);
  }
  return 0;
}
