/* An NVTX tool that does nothing: NVTX_INJECTION64_PATH=null_tool.so makes the NVTX calls of
 * benchmarks/recorder_overhead.c land in empty functions. Their cost is what any tool pays
 * before doing anything (NVTX's dispatch through its function table, the call itself):
 * bench_recorder_native.py subtracts it from the recorder's to show where the time goes. */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

static int push_a(const char* message) {
  (void)message;
  return 0;
}
static int pop(void) { return 0; }
static nvtxRangeId_t start_a(const char* message) {
  (void)message;
  return 1;
}
static void end(nvtxRangeId_t id) { (void)id; }

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const NvtxExportTableCallbacks* callbacks = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable core = 0;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &size) || !core) return 0;
  if (size > NVTX_CBID_CORE_RangePop) {
    *core[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
    *core[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    *core[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)start_a;
    *core[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)end;
  }
  return 1;
}
