/* A host whose wall clock runs ahead of the others' (NTP skew), for one process: preloaded
 * (LD_PRELOAD), CLOCK_REALTIME reads REALTIME_SKEW_NS nanoseconds ahead; every other clock,
 * CLOCK_MONOTONIC among them, reads as it is. The recorder's realtime anchor (the segment
 * header's start_realtime_ns) is then off by the skew, as on such a host. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

int clock_gettime(clockid_t id, struct timespec* ts) {
  static int (*real)(clockid_t, struct timespec*);
  if (!real) real = (int (*)(clockid_t, struct timespec*))dlsym(RTLD_NEXT, "clock_gettime");
  const int rc = real(id, ts);
  const char* skew = getenv("REALTIME_SKEW_NS");
  if (rc == 0 && id == CLOCK_REALTIME && skew) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + atoll(skew);
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return rc;
}
