/* Nested push/pop ranges on two threads, start/end ranges (one ended on another thread),
 * a named domain nested under default-domain ranges: the workload of
 * tests/test_nsys_reports.py, run under the real nsys and under our recorder.
 * `nested_ranges open` also leaves one push/pop and one start/end range open at exit. */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static nvtxDomainHandle_t trainer;
static nvtxRangeId_t handoff;

static void domain_push(const char* message) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = message;
  nvtxDomainRangePushEx(trainer, &a);
}

static void* worker(void* arg) {
  long scale = (long)arg;
  nvtxRangeEnd(handoff); /* started on the main thread */
  for (int step = 0; step < 3; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("forward");
    for (int layer = 0; layer < 2; ++layer) {
      nvtxRangePushA("layer");
      sleep_us(300 * scale);
      nvtxRangePop();
    }
    sleep_us(100);
    nvtxRangePop();
    nvtxRangePushA("backward");
    domain_push("optimizer");
    sleep_us(200 * scale);
    nvtxDomainRangePop(trainer);
    nvtxRangePop();
    nvtxRangePop();
  }
  return NULL;
}

int main(int argc, char** argv) {
  int leave_open = argc > 1 && strcmp(argv[1], "open") == 0;
  trainer = nvtxDomainCreateA("trainer");
  nvtxRangeId_t whole = nvtxRangeStartA("whole-run");
  handoff = nvtxRangeStartA("handoff");
  pthread_t th;
  pthread_create(&th, NULL, worker, (void*)2L);
  worker((void*)1L);
  pthread_join(th, NULL);
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "save";
  nvtxRangeId_t save = nvtxDomainRangeStartEx(trainer, &a);
  sleep_us(500);
  nvtxDomainRangeEnd(trainer, save);
  nvtxRangeEnd(whole);
  if (leave_open) {
    nvtxRangePushA("left-open");
    nvtxRangeStartA("left-open-async");
    sleep_us(200);
  }
  return 0;
}
