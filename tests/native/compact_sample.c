/* Compact events (format 2, cc_ops/format/record_format.h) on a clock the program sets
 * (tests/test_compact_events.py). Run with NVTX_INJECTION64_PATH=libnvtx_recorder.so,
 * NVTX_TF_RECORD_DIR and NVTX_TF_RECORDER_CLOCK=monotonic: the recorder then stamps every
 * event with clock_gettime(CLOCK_MONOTONIC), which this program defines (built with
 * -rdynamic, so that the recorder's call resolves to it): it returns `now`, which the
 * program moves forward itself. Every event's time is thus known exactly; the program prints
 * one line per event, "KIND NS" (push, pop, start, end, mark).
 *
 *   compact_sample gaps       push/pop pairs around gaps of 1 us, 2^32 - 1 ns (the largest
 *                             delta a compact event holds), 2^32 ns, 5 s and 3 hours
 *   compact_sample chunks N   N rounds of push, mark, start, pop, end, 100-106 ns apart
 *                             (run with a small NVTX_TF_CHUNK_SIZE: many chunk boundaries)
 *   compact_sample kill N     N push/pop pairs 100 ns apart ("p" first at `now`), prints "ready N"
 *                             and goes on recording such pairs until it is killed
 *   compact_sample ids        events whose fields do not fit a compact event: domains 1..70,
 *                             a color, a registered message, message ids past 2^18 (the
 *                             recorder's id counter moved on by
 *                             nvtx_recorder_test_string_ids_near_end), a payload
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now = 1000000000000000ull; /* ~11.6 days */

int clock_gettime(clockid_t clock, struct timespec* ts) {
  if (clock != CLOCK_MONOTONIC) return (int)syscall(SYS_clock_gettime, clock, ts);
  ts->tv_sec = (time_t)(now / 1000000000ull);
  ts->tv_nsec = (long)(now % 1000000000ull);
  return 0;
}

static void push(const char* m) {
  nvtxRangePushA(m);
  printf("push %llu\n", (unsigned long long)now);
}
static void pop(void) {
  nvtxRangePop();
  printf("pop %llu\n", (unsigned long long)now);
}

static void gaps(void) {
  static const uint64_t gap[] = {1000, 4294967295ull, 4294967296ull, 5000000000ull, 10800000000000ull};
  for (size_t i = 0; i < sizeof gap / sizeof gap[0]; ++i) {
    push("gap");
    now += gap[i];
    pop();
    now += 50;
  }
}

static void chunks(long n) {
  for (long i = 0; i < n; ++i) {
    push("c");
    now += 100 + i % 7;
    nvtxMarkA("m");
    printf("mark %llu\n", (unsigned long long)now);
    now += 100;
    nvtxRangeId_t id = nvtxRangeStartA("s");
    printf("start %llu\n", (unsigned long long)now);
    now += 103;
    pop();
    now += 101;
    nvtxRangeEnd(id);
    printf("end %llu\n", (unsigned long long)now);
    now += 106;
  }
}

static nvtxEventAttributes_t ascii(const char* m) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = m;
  return a;
}

static int ids(void) {
  push("first"); /* each chunk's first event is in full form: the ones below follow it */
  now += 10;
  pop();
  now += 10;
  char name[16];
  for (int k = 1; k <= 70; ++k) { /* domain ids 1..70: from 64 on, too large for a compact event */
    snprintf(name, sizeof name, "d%d", k);
    nvtxDomainHandle_t d = nvtxDomainCreateA(name);
    nvtxEventAttributes_t a = ascii(name);
    nvtxDomainRangePushEx(d, &a);
    printf("push %llu\n", (unsigned long long)now);
    now += 10;
    nvtxDomainRangePop(d);
    printf("pop %llu\n", (unsigned long long)now);
    now += 10;
  }
  nvtxEventAttributes_t colored = ascii("colored");
  colored.colorType = NVTX_COLOR_ARGB;
  colored.color = 0xFF00FF00;
  nvtxRangePushEx(&colored);
  printf("push %llu\n", (unsigned long long)now);
  now += 10;
  pop();
  now += 10;
  nvtxEventAttributes_t paid = ascii("paid");
  paid.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  paid.payload.ullValue = 7;
  nvtxRangePushEx(&paid);
  printf("push %llu\n", (unsigned long long)now);
  now += 10;
  pop();
  now += 10;
  nvtxDomainHandle_t reg_domain = nvtxDomainCreateA("reg");
  nvtxEventAttributes_t reg = ascii("");
  reg.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  reg.message.registered = nvtxDomainRegisterStringA(reg_domain, "registered");
  nvtxDomainRangePushEx(reg_domain, &reg);
  printf("push %llu\n", (unsigned long long)now);
  now += 10;
  nvtxDomainRangePop(reg_domain);
  printf("pop %llu\n", (unsigned long long)now);
  now += 10;

  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  void (*near_end)(uint32_t, uint32_t) =
      lib ? (void (*)(uint32_t, uint32_t))dlsym(lib, "nvtx_recorder_test_string_ids_near_end") : NULL;
  if (!near_end) return 3;
  near_end(1000, 0); /* the next message ids: 2^31 - 2^24 - 1000 on, far past 2^18 */
  push("high");
  now += 10;
  pop();
  now += 10;
  push("small again"); /* (still a high id: ids are never reused within a segment) */
  now += 10;
  pop();
  return 0;
}

static void kill_me(long n) {
  for (long i = 0;; ++i) {
    if (i == n) {
      printf("ready %ld\n", n);
      fflush(stdout);
    }
    nvtxRangePushA("p");
    now += 100;
    nvtxRangePop();
    now += 100;
  }
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int rc = 0;
  if (strcmp(argv[1], "gaps") == 0) {
    gaps();
  } else if (strcmp(argv[1], "chunks") == 0 && argc == 3) {
    chunks(atol(argv[2]));
  } else if (strcmp(argv[1], "kill") == 0 && argc == 3) {
    kill_me(atol(argv[2]));
  } else if (strcmp(argv[1], "ids") == 0) {
    rc = ids();
  } else {
    return 2;
  }
  fflush(stdout);
  return rc;
}
