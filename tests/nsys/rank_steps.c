/* One rank of a data-parallel run: `rank_steps RANK STEPS SLOW_RANK`. An "epoch" range
 * around STEPS "step" ranges, each around "data" (the input pipeline, three times longer on
 * SLOW_RANK) and "compute" ("forward", and "optimizer" in domain "trainer", its message a
 * registered string), a start/end range "prefetch" from inside "data" to inside "compute",
 * and a "shutdown" range left open at exit. The workload of tests/test_analyze_recipes.py:
 * run once per rank under the real nsys and under our recorder. Every step range carries the
 * same message, as the nvtx_pace recipe's --name matches it exactly. */
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void domain_push(nvtxDomainHandle_t domain, nvtxStringHandle_t message) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = message;
  nvtxDomainRangePushEx(domain, &a);
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  int rank = atoi(argv[1]), steps = atoi(argv[2]), slow = atoi(argv[3]);
  nvtxDomainHandle_t trainer = nvtxDomainCreateA("trainer");
  nvtxStringHandle_t optimizer = nvtxDomainRegisterStringA(trainer, "optimizer");
  nvtxRangePushA("epoch");
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("step");
    nvtxRangePushA("data");
    /* durations that differ from step to step and rank to rank: quartiles worth comparing */
    sleep_us((rank == slow ? 3 : 1) * (1000 + 150 * ((step * 7 + rank) % 5)));
    nvtxRangeId_t prefetch = nvtxRangeStartA("prefetch");
    sleep_us(100);
    nvtxRangePop();
    nvtxRangePushA("compute");
    nvtxRangePushA("forward");
    sleep_us(800 + 100 * (step % 3));
    nvtxRangeEnd(prefetch);
    nvtxRangePop();
    domain_push(trainer, optimizer);
    sleep_us(300);
    nvtxDomainRangePop(trainer);
    nvtxRangePop();
    nvtxRangePop();
  }
  nvtxRangePop();
  nvtxDomainDestroy(trainer);
  nvtxRangePushA("shutdown"); /* open at exit: a range of neither tool's statistics */
  return 0;
}
