/* A capture range set and cleared at run time (issue 20.3, ../shared/repros/gate_gate1.c),
 * as nvtx_plugins_tf.testing.capture(capture_range=...) does through the control API: a
 * range's fate is decided at its start and kept to its end.
 *   "outer"            pushed before any capture range: written, popped 200 ms later;
 *   "inner"            pushed while the range is set, outside a window: not written, and its
 *                      pop (after the range is cleared) not either;
 *   "W"                the window;
 *   "startend_before"  started before the range is set, ended inside a window: written,
 *                      start and end;
 *   "skipped_start"    started inside a set range outside any window, ended after the range
 *                      is cleared: written neither.
 */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*set_capture_range_t)(const char*, const char*);

int main(void) {
  nvtxRangePushA("outer");
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  set_capture_range_t set = (set_capture_range_t)dlsym(lib, "nvtx_recorder_set_capture_range");
  if (!set) return 3;
  set("W", "stop");
  nvtxRangePushA("inner");
  nvtxRangeId_t skipped = nvtxRangeStartA("skipped_start");
  nvtxRangePushA("W");
  usleep(1000);
  nvtxRangePop();
  set(NULL, NULL);
  nvtxRangePop(); /* inner */
  nvtxRangeEnd(skipped);
  usleep(200000);
  nvtxRangePop(); /* outer */
  nvtxRangeId_t before = nvtxRangeStartA("startend_before");
  set("W", "stop");
  nvtxRangePushA("W");
  nvtxRangeEnd(before);
  nvtxRangePop();
  set(NULL, NULL);
  nvtxMarkA("after");
  return 0;
}
