/* NVTX calls from a signal handler that interrupts NVTX calls of the same thread (issue
 * 20.2 and 20.12, ../shared/repros/sig_sig.c). Another thread sends SIGUSR1 to the main
 * thread in a tight loop; the handler calls nvtxMarkA with a new text (and, with "register"
 * or "domain", registers a string and names a category too) while the main thread is
 * inside one of:
 *
 *   signal_reentry MODE ITERATIONS [HANDLED]   (goes on past ITERATIONS until the handler
 *                                               ran HANDLED times, default 2000, or 60 s)
 *     category  nvtxNameCategoryA            register  nvtxDomainRegisterStringA
 *     domain    nvtxDomainCreateA            events    push/pop, start/end, marks with
 *     malloc    malloc/free (the handler's marks must not need the allocator)   new texts
 *
 * Prints "handled=N" (handler calls) and "loop=M". Every handler mark is recorded or
 * counted as dropped; the program never crashes or hangs.
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic long handled = 0;
static atomic_int stop = 0;
static pthread_t victim;
static nvtxDomainHandle_t domain;
static int register_in_handler = 0;

/* "handler N": a text new to the thread on most calls (N = the call's number mod 100000),
 * so that the recorder's interning slow path runs inside the handler. */
static void on_signal(int s) {
  (void)s;
  char text[32] = "handler ";
  long n = handled % 100000;
  char digits[8];
  int k = 0;
  do {
    digits[k++] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  for (int i = 0; i < k; ++i) text[8 + i] = digits[k - 1 - i];
  text[8 + k] = 0;
  nvtxMarkA(text);
  if (register_in_handler) {
    nvtxDomainRegisterStringA(domain, "registered in handler");
    nvtxNameCategoryA(99, "category from handler");
  }
  handled++;
}

static void* killer(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    pthread_kill(victim, SIGUSR1);
    for (volatile int i = 0; i < 2000; ++i) {
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "category";
  int iterations = argc > 2 ? atoi(argv[2]) : 100000;
  long want_handled = argc > 3 ? atol(argv[3]) : 2000;
  victim = pthread_self();
  domain = nvtxDomainCreateA("signals");
  register_in_handler = strcmp(mode, "register") == 0 || strcmp(mode, "domain") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t k;
  pthread_create(&k, NULL, killer, NULL);
  char text[64];
  time_t deadline = time(NULL) + 60;
  int i = 0;
  for (; i < iterations || (handled < want_handled && (i & 1023 || time(NULL) < deadline)); ++i) {
    if (strcmp(mode, "category") == 0) {
      nvtxNameCategoryA(1 + (i & 7), "category name that is long enough to take a while to copy ..........");
    } else if (strcmp(mode, "register") == 0) {
      snprintf(text, sizeof text, "registered %d", i & 1023);
      nvtxDomainRegisterStringA(domain, text);
    } else if (strcmp(mode, "domain") == 0) {
      snprintf(text, sizeof text, "domain %d", i & 255);
      nvtxDomainCreateA(text);
    } else if (strcmp(mode, "events") == 0) {
      snprintf(text, sizeof text, "event %d", i); /* a new text: the interning slow path */
      nvtxRangePushA(text);
      nvtxRangeId_t id = nvtxRangeStartA("start/end");
      nvtxMarkA(text);
      nvtxRangeEnd(id);
      nvtxRangePop();
    } else if (strcmp(mode, "malloc") == 0) {
      void* volatile p = malloc(64 + (i & 4095));
      free(p);
    }
    nvtxRangePushA("work");
    nvtxRangePop();
  }
  atomic_store(&stop, 1);
  pthread_join(k, NULL);
  signal(SIGUSR1, SIG_IGN);
  printf("handled=%ld loop=%d\n", (long)handled, i);
  return 0;
}
