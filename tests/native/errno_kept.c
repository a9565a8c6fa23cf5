/* The recorder never changes the errno the program sees: errno is set to a sentinel before
 * each NVTX call that takes a slow path (the first call: the library's initialization and
 * the first segment in a folder that exists; new texts; registrations; new threads' first
 * events; a new segment after nvtx_recorder_new_segment) and checked after it. Prints
 * "changed=N calls=M" (N: calls after which errno differed), then exits 0.
 *
 *   errno_kept [TEXTS]
 */
#include <dlfcn.h>
#include <errno.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic long changed = 0, calls = 0;

#define CHECKED(call)                                    \
  do {                                                   \
    errno = EDOM;                                        \
    call;                                                \
    calls++;                                             \
    if (errno != EDOM) {                                 \
      if (changed++ == 0) {                              \
        fprintf(stderr, "%s: errno %d\n", #call, errno); \
      }                                                  \
    }                                                    \
  } while (0)

static void* thread_main(void* arg) {
  (void)arg;
  CHECKED(nvtxRangePushA("thread"));  // the thread's first event: its state is made
  CHECKED(nvtxRangePop());
  return NULL;
}

int main(int argc, char** argv) {
  int texts = argc > 1 ? atoi(argv[1]) : 3000;
  char text[32];
  CHECKED(nvtxMarkA("first"));
  for (int i = 0; i < texts; ++i) {
    snprintf(text, sizeof text, "text %d", i);
    CHECKED(nvtxRangePushA(text));
    CHECKED(nvtxRangePop());
  }
  nvtxDomainHandle_t domain = NULL;
  CHECKED(domain = nvtxDomainCreateA("errno"));
  CHECKED(nvtxDomainRegisterStringA(domain, "registered"));
  CHECKED(nvtxDomainNameCategoryA(domain, 1, "category"));
  CHECKED(nvtxNameCategoryA(2, "category 2"));
  CHECKED(nvtxNameOsThreadA(0, "main"));
  for (int i = 0; i < 8; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0) return 2;
    pthread_join(t, NULL);
  }
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  uint64_t (*new_segment)(void) = lib ? (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_new_segment") : NULL;
  if (!new_segment) return 3;
  for (int i = 0; i < 20; ++i) {
    new_segment();
    CHECKED(nvtxMarkA("in a new segment"));
  }
  CHECKED(nvtxDomainDestroy(domain));
  printf("changed=%ld calls=%ld\n", (long)changed, (long)calls);
  return 0;
}
