/* Deep nesting around a capture window (issue 20.5, ../shared/repros/gate_deep.c), run with
 * NVTX_TF_CAPTURE_RANGE=W: DEPTH levels in the default domain and in domain "deep" pushed
 * outside any window (not written); "W" opens the window; INSIDE levels of "deep" pushed
 * inside it (written); W popped while they are still open (the window closes); LATE levels of
 * "deep" pushed after it (not written); then every level popped. Every pop follows its push,
 * whatever its depth: the INSIDE levels' pops are written, no other pop is.
 *
 *   deep_window [DEPTH] [INSIDE] [LATE]   (defaults 10000 3 5000)
 */
#include <nvtx3/nvToolsExt.h>
#include <stdlib.h>

static nvtxEventAttributes_t message(const char* m) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = m;
  return a;
}

int main(int argc, char** argv) {
  int depth = argc > 1 ? atoi(argv[1]) : 10000;
  int inside = argc > 2 ? atoi(argv[2]) : 3;
  int late = argc > 3 ? atoi(argv[3]) : 5000;
  nvtxDomainHandle_t d = nvtxDomainCreateA("deep");
  nvtxEventAttributes_t level = message("level"), in = message("inside"), after = message("late");
  for (int i = 0; i < depth; ++i) {
    nvtxRangePushA("outside");
    nvtxDomainRangePushEx(d, &level);
  }
  nvtxRangePushA("W");
  for (int i = 0; i < inside; ++i) nvtxDomainRangePushEx(d, &in);
  nvtxRangePop(); /* W: the window closes */
  for (int i = 0; i < late; ++i) nvtxDomainRangePushEx(d, &after);
  for (int i = 0; i < late + inside + depth; ++i) nvtxDomainRangePop(d);
  for (int i = 0; i < depth; ++i) nvtxRangePop();
  return 0;
}
