/* The recorder's timestamps against CLOCK_MONOTONIC (tests/test_recorder_clock.py).
 * Run with NVTX_INJECTION64_PATH=libnvtx_recorder.so and NVTX_TF_RECORD_DIR set.
 *
 *   clock_sample brackets N   N push/pop pairs on the main thread, each call between two
 *                             clock_gettime(CLOCK_MONOTONIC) reads; prints one line per pair,
 *                             "b BEFORE_PUSH AFTER_PUSH BEFORE_POP AFTER_POP". Pauses of 0 to
 *                             0.2 ms between pairs and of 15 ms every 50 pairs (longer than
 *                             the clock's 10 ms span) make the recorder's clock re-anchor
 *                             while busy and after idling.
 *   clock_sample threads T N  T threads recording N push/pop pairs each, yielding every
 *                             1000 pairs (so threads move between CPUs).
 *   clock_sample compare N    N reads of nvtx_recorder_now_ns() each between two
 *                             clock_gettime reads, with the same pauses as brackets every
 *                             100 reads; prints max_before_ns / max_after_ns: how far a
 *                             reading fell before its first or after its second read.
 * Every mode prints clock=tsc|monotonic (nvtx_recorder_clock_source()).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, NULL);
}

/* 0..0.2 ms, and 15 ms every 50th step. */
static void step_pause(long i) {
  if (i % 50 == 49)
    pause_ns(15 * 1000 * 1000);
  else if (i % 4)
    pause_ns((i % 5) * 50 * 1000);
}

static void* recorder_symbol(const char* name) {
  const char* path = getenv("NVTX_INJECTION64_PATH");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  void* sym = lib ? dlsym(lib, name) : NULL;
  if (!sym) {
    fprintf(stderr, "recorder symbol %s not found (NVTX_INJECTION64_PATH=%s)\n", name, path ? path : "");
    exit(2);
  }
  return sym;
}

static long pairs_per_thread;

static void* thread_main(void* arg) {
  (void)arg;
  for (long i = 0; i < pairs_per_thread; ++i) {
    nvtxRangePushA("thread");
    nvtxRangePop();
    if (i % 1000 == 999) sched_yield();
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: clock_sample brackets N | threads T N | compare N\n");
    return 2;
  }
  nvtxMarkA("attach"); /* loads the recorder */
  const char* (*clock_source)(void) = (const char* (*)(void))recorder_symbol("nvtx_recorder_clock_source");
  printf("clock=%s\n", clock_source());
  if (strcmp(argv[1], "brackets") == 0) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; ++i) {
      uint64_t a = mono_ns();
      nvtxRangePushA("bracket");
      uint64_t b = mono_ns();
      uint64_t c = mono_ns();
      nvtxRangePop();
      uint64_t d = mono_ns();
      printf("b %llu %llu %llu %llu\n", (unsigned long long)a, (unsigned long long)b, (unsigned long long)c,
             (unsigned long long)d);
      step_pause(i);
    }
  } else if (strcmp(argv[1], "threads") == 0 && argc >= 4) {
    int t = atoi(argv[2]);
    pairs_per_thread = atol(argv[3]);
    if (t < 1 || t > 64) t = 1;
    pthread_t th[64];
    for (int i = 0; i < t; ++i) pthread_create(&th[i], NULL, thread_main, NULL);
    for (int i = 0; i < t; ++i) pthread_join(th[i], NULL);
  } else if (strcmp(argv[1], "compare") == 0) {
    uint64_t (*now_ns)(void) = (uint64_t (*)(void))recorder_symbol("nvtx_recorder_now_ns");
    long n = atol(argv[2]);
    uint64_t max_before = 0, max_after = 0;
    for (long i = 0; i < n; ++i) {
      uint64_t a = mono_ns();
      uint64_t r = now_ns();
      uint64_t b = mono_ns();
      if (r < a && a - r > max_before) max_before = a - r;
      if (r > b && r - b > max_after) max_after = r - b;
      if (i % 100 == 99) step_pause(i / 100);
    }
    printf("max_before_ns=%llu\nmax_after_ns=%llu\n", (unsigned long long)max_before, (unsigned long long)max_after);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  return 0;
}
