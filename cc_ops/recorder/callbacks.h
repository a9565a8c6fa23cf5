// The NVTX entry points of the recorder and the code that installs them into the
// callback tables NVTX hands out (NVTX_CB_MODULE_CORE / NVTX_CB_MODULE_CORE2).
#ifndef NVTX_PLUGINS_TF_RECORDER_CALLBACKS_H_
#define NVTX_PLUGINS_TF_RECORDER_CALLBACKS_H_

#ifndef NVTX_NO_IMPL
#define NVTX_NO_IMPL  // we implement callbacks, we never call the NVTX API
#endif
#include <nvtx3/nvToolsExt.h>

namespace nvtx_recorder {

// Fills the entries of a module's table (only ids < size, only non-null slots).
void InstallCoreCallbacks(NvtxFunctionTable table, unsigned int size);
void InstallCore2Callbacks(NvtxFunctionTable table, unsigned int size);

// nvtxDomainIsEnabled (payload extension): 0 for a domain the domain filter excludes
// (a null handle: the default domain), 1 otherwise.
uint8_t NVTX_API DomainIsEnabled(nvtxDomainHandle_t domain);

// nvtxMarkPayload, nvtxRangePushPayload, nvtxRangeStartPayload (payload extension): as the
// *Ex calls with NVTX_PAYLOAD_TYPE_EXT and no message (data: nvtxPayloadData_t[count]).
// nvtxRangePopPayload and nvtxRangeEndPayload end the range; their payloads are not kept.
void NVTX_API MarkPayload(nvtxDomainHandle_t domain, const void* data, size_t count);
int NVTX_API RangePushPayload(nvtxDomainHandle_t domain, const void* data, size_t count);
int NVTX_API RangePopPayload(nvtxDomainHandle_t domain, const void* data, size_t count);
nvtxRangeId_t NVTX_API RangeStartPayload(nvtxDomainHandle_t domain, const void* data, size_t count);
void NVTX_API RangeEndPayload(nvtxDomainHandle_t domain, nvtxRangeId_t id, const void* data, size_t count);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_CALLBACKS_H_
