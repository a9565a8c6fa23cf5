/* The parts of a recorded NVTX event measured alone, in ns per event (one thread, a loop of
 * N each, the loop's own cost included), for bench_recorder_native.py's breakdown:
 *
 *   tsc          a plain TSC read (rdtsc: push/pop's clock)
 *   tsc_ordered  an ordered TSC read (lfence; rdtsc; lfence: start/end's clock, cross-thread order)
 *   monotonic    clock_gettime(CLOCK_MONOTONIC) (the other clock)
 *   store16      a 16-byte record stored into a 256 KiB chunk (the recorder's chunk size),
 *                wrapping (the buffer write, its cache misses included)
 *
 *   event_parts N   prints one line of key=value pairs
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 10000000;
  volatile uint64_t sink = 0;
  double t0 = now_ns();
  for (long i = 0; i < n; ++i) sink += __rdtsc();
  const double tsc = (now_ns() - t0) / n;
  t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    _mm_lfence();
    sink += __rdtsc();
    _mm_lfence();
  }
  const double ordered = (now_ns() - t0) / n;
  struct timespec ts;
  t0 = now_ns();
  for (long i = 0; i < n; ++i) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sink += ts.tv_nsec;
  }
  const double mono = (now_ns() - t0) / n;
  enum { kChunk = 256 * 1024, kWords = kChunk / 8 };
  uint64_t* chunk = aligned_alloc(4096, kChunk);
  memset(chunk, 0, kChunk);
  t0 = now_ns();
  for (long i = 0, w = 0; i < n; ++i) {
    chunk[w] = (uint64_t)i;
    chunk[w + 1] = (uint64_t)i ^ 0x5bd1e995u;
    w = (w + 2) % kWords;
    __asm__ volatile("" ::: "memory");  // keep every store
  }
  const double store = (now_ns() - t0) / n;
  printf("tsc=%.2f tsc_ordered=%.2f monotonic=%.2f store16=%.2f sink=%llu\n", tsc, ordered, mono, store,
         (unsigned long long)(sink & 1));
  free(chunk);
  return 0;
}
