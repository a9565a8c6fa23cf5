/* What the benchmarks' C ranks share (benchmarks/rank_workload.c, benchmarks/paced_rank.c):
 * opening a push/pop range of a domain by its ASCII message. */
#ifndef NVTX_PLUGINS_TF_BENCH_NVTX_H_
#define NVTX_PLUGINS_TF_BENCH_NVTX_H_

#include <nvtx3/nvToolsExt.h>

static inline void push(nvtxDomainHandle_t domain, const char* message) {
  nvtxEventAttributes_t attr = {0};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = message;
  nvtxDomainRangePushEx(domain, &attr);
}

#endif /* NVTX_PLUGINS_TF_BENCH_NVTX_H_ */
