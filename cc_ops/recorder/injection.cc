// InitializeInjectionNvtx2: the entry point NVTX calls after dlopen'ing the library named
// by NVTX_INJECTION64_PATH. Every library in the process that embeds NVTX (the `nvtx`
// Python package, our TensorFlow ops, ...) calls it once with its own callback tables;
// all of them are pointed at the same callbacks and the same process-wide state.
#include <atomic>

#include "recorder/callbacks.h"
// After callbacks.h (NVTX_NO_IMPL): the payload extension's ids and module types only.
#include <nvtx3/nvToolsExtPayload.h>

#include "recorder/config.h"
#include "recorder/gate.h"
#include "recorder/os_util.h"
#include "recorder/payload_ext.h"
#include "recorder/recorder_internal.h"
#include "recorder/segment_writer.h"

namespace nvtx_recorder {
std::atomic<int> g_attach_count{0};
}  // namespace nvtx_recorder

NVTXREC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  using namespace nvtx_recorder;
  ErrnoGuard keep_errno;  // (called inside the program's first NVTX call)
  if (!get_export_table) return 0;
  // No usable recording directory: return 0 so NVTX turns this library's calls into no-ops.
  if (!ConfigureFromEnvironment()) return 0;
  ConfigureGateFromEnvironment();  // capture range and domain filter, before any event

  const NvtxExportTableCallbacks* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) || !callbacks->GetModuleFunctionTable) {
    return 0;
  }
  NvtxFunctionTable core = nullptr;
  NvtxFunctionTable core2 = nullptr;
  unsigned int core_size = 0;
  unsigned int core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) || !core) return 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) || !core2) {
    core2 = nullptr;  // an NVTX v1 client: core only
  }
  InstallCoreCallbacks(core, core_size);
  if (core2) InstallCore2Callbacks(core2, core2_size);

  const NvtxExportTableVersionInfo* version =
      static_cast<const NvtxExportTableVersionInfo*>(get_export_table(NVTX_ETID_VERSIONINFO));
  if (version && version->struct_size >= sizeof(NvtxExportTableVersionInfo) && version->SetInjectionNvtxVersion) {
    version->SetInjectionNvtxVersion(NVTX_VERSION);
  }
  g_attach_count.fetch_add(1, std::memory_order_relaxed);
  return 1;
}

// InitializeInjectionNvtxExtension: NVTX's extension modules call it (after the core's
// initialization) with their function slots. We answer one function of the payload
// extension, nvtxDomainIsEnabled, so that callers that ask (the `nvtx` Python package's
// get_domain returns a no-op domain for a disabled one) skip the work for domains the
// domain filter excludes (gate.h). Slots we leave unset become no-ops, as without this
// function. Always 1: 0 would make NVTX unload the library.
NVTXREC_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* info) {
  using namespace nvtx_recorder;
  ErrnoGuard keep_errno;
  if (!info || info->structSize < sizeof(nvtxExtModuleInfo_t) || info->moduleId != NVTX_EXT_PAYLOAD_MODULEID) return 1;
  // The slot numbering is that of the compatibility id our headers define.
  if (info->compatId != NVTX_EXT_PAYLOAD_COMPATID || !ConfigureFromEnvironment()) return 1;
  ConfigureGateFromEnvironment();
  for (size_t i = 0; i < info->segmentsCount && info->segments; ++i) {
    nvtxExtModuleSegment_t& segment = info->segments[i];
    if (segment.functionSlots && segment.slotCount > NVTX3EXT_CBID_nvtxDomainIsEnabled) {
      segment.functionSlots[NVTX3EXT_CBID_nvtxDomainIsEnabled] = reinterpret_cast<intptr_t>(DomainIsEnabled);
    }
    // Schema and enum registration (payload_ext.h): kPayloadSchema records. Extended
    // payloads arrive through the core's *Ex calls (NVTX_PAYLOAD_TYPE_EXT) and the nvtx*Payload calls.
    if (segment.functionSlots && segment.slotCount > NVTX3EXT_CBID_nvtxPayloadEnumRegister) {
      segment.functionSlots[NVTX3EXT_CBID_nvtxPayloadSchemaRegister] =
          reinterpret_cast<intptr_t>(PayloadSchemaRegister);
      segment.functionSlots[NVTX3EXT_CBID_nvtxPayloadEnumRegister] = reinterpret_cast<intptr_t>(PayloadEnumRegister);
    }
    if (segment.functionSlots && segment.slotCount > NVTX3EXT_CBID_nvtxRangeEndPayload) {
      intptr_t* slots = segment.functionSlots;
      slots[NVTX3EXT_CBID_nvtxMarkPayload] = reinterpret_cast<intptr_t>(MarkPayload);
      slots[NVTX3EXT_CBID_nvtxRangePushPayload] = reinterpret_cast<intptr_t>(RangePushPayload);
      slots[NVTX3EXT_CBID_nvtxRangePopPayload] = reinterpret_cast<intptr_t>(RangePopPayload);
      slots[NVTX3EXT_CBID_nvtxRangeStartPayload] = reinterpret_cast<intptr_t>(RangeStartPayload);
      slots[NVTX3EXT_CBID_nvtxRangeEndPayload] = reinterpret_cast<intptr_t>(RangeEndPayload);
    }
  }
  return 1;
}
