/* What the benchmarks' C ranks share (benchmarks/rank_workload.c, benchmarks/paced_rank.c,
 * benchmarks/step_rank.c): opening a push/pop range of a domain by its ASCII message; the
 * monotonic clock in ns and a sleep of ns that resumes after a signal; saying a rank is up
 * (the file READY made) and waiting for the file GO. */
#ifndef NVTX_PLUGINS_TF_BENCH_NVTX_H_
#define NVTX_PLUGINS_TF_BENCH_NVTX_H_

#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static inline void push(nvtxDomainHandle_t domain, const char* message) {
  nvtxEventAttributes_t attr = {0};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = message;
  nvtxDomainRangePushEx(domain, &attr);
}

static inline long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void sleep_ns(long long ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Makes the file `ready`, then waits until the file `go` exists; 1 (said) if `ready` cannot be made. */
static inline int ready_then_go(const char* ready, const char* go) {
  FILE* f = fopen(ready, "w");
  if (!f) {
    perror(ready);
    return 1;
  }
  fclose(f);
  while (access(go, F_OK) != 0) usleep(10000);
  return 0;
}

#endif /* NVTX_PLUGINS_TF_BENCH_NVTX_H_ */
