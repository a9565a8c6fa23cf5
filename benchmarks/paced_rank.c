/* One rank of issue 47's criterion 2, as NVTX ranges: for benchmarks/bench_watch.py.
 *
 *   paced_rank READY GO SECONDS
 *
 * Creates the file READY (it is up: its recorder attached), waits for the file GO, then for
 * SECONDS seconds runs steps of about 10 a second: a "step N" range (domain "bench") around
 * 199 empty ranges (20 names, r0..r19) and a sleep of 99 ms, 200 ranges a step. The sleep is
 * relative, not to a mark: what slows the rank (a CPU taken by another process, the wake-up
 * late) lengthens its steps, which is what the benchmark compares.
 * Run under `nvtx-tf record`. A sleep-based loop in C: 64 of them fit 2 cores, where 64
 * Python interpreters doing the same would not.
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bench_nvtx.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: paced_rank READY GO SECONDS\n");
    return 2;
  }
  const double seconds = atof(argv[3]);
  nvtxDomainHandle_t bench = nvtxDomainCreateA("bench");
  static const char* names[20] = {"r0",  "r1",  "r2",  "r3",  "r4",  "r5",  "r6",  "r7",  "r8",  "r9",
                                  "r10", "r11", "r12", "r13", "r14", "r15", "r16", "r17", "r18", "r19"};
  if (ready_then_go(argv[1], argv[2])) return 1;
  const long long start = now_ns(), end = start + (long long)(seconds * 1e9);
  char name[32];
  for (long s = 0; now_ns() < end; ++s) {
    snprintf(name, sizeof(name), "step %ld", s);
    push(bench, name);
    for (int k = 0; k < 199; ++k) {
      push(bench, names[k % 20]);
      nvtxDomainRangePop(bench);
    }
    sleep_ns(99000000LL);
    nvtxDomainRangePop(bench);
  }
  return 0;
}
