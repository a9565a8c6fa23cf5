// InitializeInjectionNvtx2: the entry point NVTX calls after dlopen'ing the library named
// by NVTX_INJECTION64_PATH. Every library in the process that embeds NVTX (the `nvtx`
// Python package, our TensorFlow ops, ...) calls it once with its own callback tables;
// all of them are pointed at the same callbacks and the same process-wide state.
#include <atomic>

#include "recorder/callbacks.h"
#include "recorder/config.h"
#include "recorder/gate.h"
#include "recorder/recorder_internal.h"
#include "recorder/segment_writer.h"

namespace nvtx_recorder {
std::atomic<int> g_attach_count{0};
}  // namespace nvtx_recorder

NVTXREC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  using namespace nvtx_recorder;
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
