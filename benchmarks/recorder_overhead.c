/* Cost of NVTX push/pop (or start/end) with an ASCII message, per event, in the calling
 * thread.
 *
 *   recorder_overhead THREADS EVENTS_PER_THREAD [pushpop|startend]
 *
 * Run with no tool attached (NVTX calls are no-ops) or with NVTX_INJECTION64_PATH set to
 * libnvtx_recorder.so and NVTX_TF_RECORD_DIR set. Each thread does EVENTS_PER_THREAD/2
 * push/pop pairs after a short warm-up (tool load, first chunk, string definition);
 * startend does EVENTS_PER_THREAD/2 nvtxRangeStartA/nvtxRangeEnd pairs instead (the recorder
 * stamps those with an ordered clock read, cc_ops/recorder/clock.h). Prints one line of
 * key=value pairs:
 *   ns_per_event      mean over threads of (thread wall time / events)
 *   cpu_ns_per_event  same with the thread's CPU time (user + kernel; robust when the
 *                     machine is shared)
 *   hwm_growth_kb  growth of the peak RSS (VmHWM) over the timed loop
 *   clock_tsc      1 when the recorder stamps events from the TSC, 0 with clock_gettime,
 *                  -1 with no tool or a recorder without the choice (nvtx_recorder_clock_source,
 *                  cc_ops/recorder/clock.h)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long events_per_thread;
static int start_end; /* 1: start/end pairs, 0: push/pop */
static pthread_barrier_t barrier;

static double clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static long vm_kb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof(line), f)) {
    if (strncmp(line, key, n) == 0) {
      v = atol(line + n + 1);
      break;
    }
  }
  if (f) fclose(f);
  return v;
}

/* After the first NVTX call (the tool is loaded then). */
static int clock_tsc(void) {
  const char* path = getenv("NVTX_INJECTION64_PATH");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  const char* (*source)(void) = lib ? (const char* (*)(void))dlsym(lib, "nvtx_recorder_clock_source") : NULL;
  return source ? strcmp(source(), "tsc") == 0 : -1;
}

struct result {
  double wall_ns, cpu_ns;
};

static void* worker(void* arg) {
  struct result* out = (struct result*)arg;
  for (int i = 0; i < 1000; ++i) { /* warm-up */
    nvtxRangePushA("bench-step");
    nvtxRangePop();
  }
  pthread_barrier_wait(&barrier);
  long pairs = events_per_thread / 2;
  double t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (start_end) {
    for (long i = 0; i < pairs; ++i) nvtxRangeEnd(nvtxRangeStartA("bench-step"));
  } else {
    for (long i = 0; i < pairs; ++i) {
      nvtxRangePushA("bench-step");
      nvtxRangePop();
    }
  }
  double t1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  out->wall_ns = (t1 - t0) / (double)(pairs * 2);
  out->cpu_ns = (c1 - c0) / (double)(pairs * 2);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  events_per_thread = argc > 2 ? atol(argv[2]) : 10000000L;
  start_end = argc > 3 && strcmp(argv[3], "startend") == 0;
  if (threads < 1 || threads > 64) threads = 1;
  pthread_t th[64];
  struct result ns[64];
  pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; ++t) pthread_create(&th[t], NULL, worker, &ns[t]);
  pthread_barrier_wait(&barrier); /* all warm-ups done */
  long hwm_before = vm_kb("VmHWM:");
  for (int t = 0; t < threads; ++t) pthread_join(th[t], NULL);
  long hwm_after = vm_kb("VmHWM:");
  double wall = 0, cpu = 0;
  for (int t = 0; t < threads; ++t) {
    wall += ns[t].wall_ns;
    cpu += ns[t].cpu_ns;
  }
  printf(
      "threads=%d events=%ld ns_per_event=%.2f cpu_ns_per_event=%.2f hwm_before_kb=%ld hwm_growth_kb=%ld "
      "clock_tsc=%d\n",
      threads, events_per_thread * threads, wall / threads, cpu / threads, hwm_before, hwm_after - hwm_before,
      clock_tsc());
  return 0;
}
