/* kill_writer.c: two threads record ranges for SECONDS (killed meanwhile by SIGKILL, or read
 * while they run: tests/test_recorder_review3.py; after ../shared/repros/live_read.c).
 *   MODE full:    start/end with a u64 payload (full-form records: the body is stored first,
 *                 the first word last);
 *   MODE compact: start/end and push/pop without attributes (compact records: one word,
 *                 after a start's or an end's range id);
 *   MODE mixed:   both, alternately.
 *   ROTATE 1:     a new segment every 20 ms (small segments: quick live reads).
 * Prints nothing; `kill_writer SECONDS MODE ROTATE`. */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds = 5;
static int full = 1, compact = 0;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* work(void* arg) {
  (void)arg;
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "full";
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  double end = now() + seconds;
  unsigned long long i = 0;
  while (now() < end) {
    for (int k = 0; k < 1000; ++k) {
      if (full) {
        a.payload.ullValue = ++i;
        nvtxRangeEnd(nvtxRangeStartEx(&a));
      }
      if (compact) {
        nvtxRangeEnd(nvtxRangeStartA("compact"));
        nvtxRangePushA("compact");
        nvtxRangePop();
      }
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) seconds = atof(argv[1]);
  if (argc > 2) {
    full = strcmp(argv[2], "compact") != 0;
    compact = strcmp(argv[2], "full") != 0;
  }
  int rotate = argc > 3 && atoi(argv[3]) != 0;
  nvtxMarkA("main"); /* loads the injection library */
  pthread_t t[2];
  for (int k = 0; k < 2; ++k) pthread_create(&t[k], NULL, work, NULL);
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  uint64_t (*new_segment)(void) = lib ? (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_new_segment") : NULL;
  double end = now() + seconds;
  while (rotate && new_segment && now() < end) {
    usleep(20000);
    new_segment();
  }
  for (int k = 0; k < 2; ++k) pthread_join(t[k], NULL);
  return 0;
}
