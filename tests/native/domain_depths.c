/* Push/pop depths per domain (issue 20.4, ../shared/repros/gate_slots.c): 257 domains, so
 * that two ids differ by 256; the first push in each returns depth 0. With
 * NVTX_TF_CAPTURE_RANGE=W@A the window opened by "W" in A closes when "W" pops, though a
 * range of another domain opened inside it is still open: "after" and "after2" are not
 * written. Prints "B=<depth> A=<depth>".
 */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>

static nvtxEventAttributes_t message(const char* m) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = m;
  return a;
}

int main(void) {
  nvtxDomainHandle_t A = nvtxDomainCreateA("A"), B = 0;
  char name[32];
  for (int i = 2; i <= 257; ++i) {
    snprintf(name, sizeof name, "dom%d", i);
    B = nvtxDomainCreateA(name);
  }
  nvtxEventAttributes_t w = message("W"), b = message("b"), after = message("after"), x = message("x");
  int depth_b = nvtxDomainRangePushEx(B, &x);
  int depth_a = nvtxDomainRangePushEx(A, &x);
  printf("B=%d A=%d\n", depth_b, depth_a);
  nvtxDomainRangePop(A);
  nvtxDomainRangePop(B);
  nvtxDomainRangePushEx(A, &w);
  nvtxDomainRangePushEx(B, &b);
  nvtxDomainRangePop(A); /* closes W */
  nvtxDomainRangePop(B);
  nvtxDomainRangePushEx(A, &after);
  nvtxDomainRangePop(A);
  nvtxRangePushA("after2");
  nvtxRangePop();
  return 0;
}
