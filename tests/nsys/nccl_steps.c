/* `nccl_steps STEPS`: STEPS "matmul" push/pop ranges (the steps nvtx_pace times), each around
 * an "ncclAllReduce" range of domain "NCCL" (its message a registered string, as NCCL's own
 * NVTX ranges are) inside a start/end range "prefetch", and an "ncclBroadcast" range every
 * other step. Every range lasts at least
 * 50 us, so the recipes, which leave out ranges of 0 ns, count them all. The workload of
 * tests/test_nsys_2024.py: run under the real nsys and under our recorder. */
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

static void nccl_range(nvtxDomainHandle_t nccl, nvtxStringHandle_t message) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = message;
  nvtxDomainRangePushEx(nccl, &a);
  sleep_us(50);
  nvtxDomainRangePop(nccl);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  int steps = atoi(argv[1]);
  nvtxDomainHandle_t nccl = nvtxDomainCreateA("NCCL");
  nvtxStringHandle_t all_reduce = nvtxDomainRegisterStringA(nccl, "ncclAllReduce");
  nvtxStringHandle_t broadcast = nvtxDomainRegisterStringA(nccl, "ncclBroadcast");
  for (int step = 0; step < steps; ++step) {
    nvtxRangePushA("matmul");
    sleep_us(50);
    nvtxRangeId_t prefetch = nvtxRangeStartA("prefetch");
    nccl_range(nccl, all_reduce);
    nvtxRangeEnd(prefetch);
    if (step % 2 == 0) nccl_range(nccl, broadcast);
    nvtxRangePop();
  }
  return 0;
}
