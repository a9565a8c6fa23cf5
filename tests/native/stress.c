/* Everything the review of issue 20 found, at once, for the sanitizer builds (make sanitize,
 * tests/test_stress.py):
 *   - WORKERS threads push/pop nested ranges (every 64th iteration 300 levels deep, in the
 *     default domain and in "stress"), mark, and start ranges that the next worker ends
 *     (a release/acquire hand-off through a mailbox per worker);
 *   - a signal thread sends SIGUSR1 to the workers; the handler marks "sig" with a text new
 *     to the thread on most calls;
 *   - the main thread starts new segments (rotation) and, with "windows", sets and clears a
 *     capture range "W" (repeat) and opens and closes windows, paced by the workers' progress
 *     (a round every 1/64 of their iterations, whatever the machine's load: paced by wall time,
 *     a loaded machine made ten times as many segments, each a slow path for every thread).
 *
 *   stress [plain|windows] [WORKERS] [ITERATIONS]   (defaults plain 3 20000)
 *
 * Prints "pushes=N starts=N marks=N handled=N segments=N": what the program emitted (pushes:
 * the "w" ranges; every start is ended).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_WORKERS 16

static int workers = 3;
static long iterations = 20000;
static atomic_int running;
static atomic_int stop_signals;
static _Atomic unsigned long long mailbox[MAX_WORKERS];
static atomic_long pushes, starts, marks, handled;
static atomic_long progress; /* iterations done, all workers */
static pthread_t worker_threads[MAX_WORKERS];
static nvtxDomainHandle_t domain;

static void on_signal(int s) {
  (void)s;
  char text[16] = "sig ";
  long n = atomic_fetch_add(&handled, 1) % 1000;
  text[4] = (char)('0' + n / 100);
  text[5] = (char)('0' + n / 10 % 10);
  text[6] = (char)('0' + n % 10);
  text[7] = 0;
  nvtxMarkA(text);
}

static void end_mail(int me) {
  unsigned long long id = atomic_exchange_explicit(&mailbox[me], 0, memory_order_acquire);
  if (id) nvtxRangeEnd(id);
}

static void* worker(void* arg) {
  int me = (int)(intptr_t)arg;
  int next = (me + 1) % workers;
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "d";
  for (long i = 0; i < iterations; ++i) {
    int depth = (i % 64 == 0) ? 300 : 1 + (int)(i % 3);
    for (int k = 0; k < depth; ++k) {
      nvtxRangePushA("w");
      nvtxDomainRangePushEx(domain, &a);
    }
    atomic_fetch_add(&pushes, depth);
    nvtxMarkA("m");
    atomic_fetch_add(&marks, 1);
    for (int k = 0; k < depth; ++k) {
      nvtxDomainRangePop(domain);
      nvtxRangePop();
    }
    /* hand a started range to the next worker; end what was handed to this one */
    nvtxRangeId_t id = nvtxRangeStartA("handed");
    atomic_fetch_add(&starts, 1);
    unsigned long long expected = 0;
    while (!atomic_compare_exchange_weak_explicit(&mailbox[next], &expected, id, memory_order_release,
                                                  memory_order_relaxed)) {
      expected = 0;
      end_mail(me);
    }
    end_mail(me);
    atomic_fetch_add_explicit(&progress, 1, memory_order_relaxed);
  }
  atomic_fetch_sub(&running, 1);
  while (atomic_load(&running) > 0) end_mail(me);
  end_mail(me);
  return NULL;
}

static void* signaller(void* arg) {
  (void)arg;
  while (!atomic_load(&stop_signals)) {
    for (int t = 0; t < workers; ++t) pthread_kill(worker_threads[t], SIGUSR1);
    usleep(50);
  }
  return NULL;
}

int main(int argc, char** argv) {
  int windows = argc > 1 && strcmp(argv[1], "windows") == 0;
  if (argc > 2) workers = atoi(argv[2]);
  if (argc > 3) iterations = atol(argv[3]);
  if (workers < 2) workers = 2;
  if (workers > MAX_WORKERS) workers = MAX_WORKERS;
  domain = nvtxDomainCreateA("stress");
  nvtxMarkA("start");
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  uint64_t (*new_segment)(void) = lib ? (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_new_segment") : NULL;
  int (*set_range)(const char*, const char*) =
      lib ? (int (*)(const char*, const char*))dlsym(lib, "nvtx_recorder_set_capture_range") : NULL;
  if (!new_segment || !set_range) {
    fprintf(stderr, "stress: the recorder's control API is not there: %s\n", lib ? "no symbol" : dlerror());
    return 3;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  atomic_store(&running, workers);
  for (int t = 0; t < workers; ++t) pthread_create(&worker_threads[t], NULL, worker, (void*)(intptr_t)t);
  pthread_t s;
  pthread_create(&s, NULL, signaller, NULL);
  long segments = 0;
  const long step = iterations * workers / 64 + 1;
  long next = 0;
  for (int round = 0; atomic_load(&running) > 0; ++round) {
    while (atomic_load(&running) > 0 && atomic_load_explicit(&progress, memory_order_relaxed) < next) usleep(100);
    next = atomic_load_explicit(&progress, memory_order_relaxed) + step;
    if (round % 4 == 0) {
      new_segment();
      segments++;
    }
    if (windows) {
      if (round % 8 == 0) set_range("W", "repeat");
      nvtxRangePushA("W");
      usleep(200);
      nvtxRangePop();
      if (round % 8 == 7) set_range(NULL, NULL);
    }
  }
  for (int t = 0; t < workers; ++t) pthread_join(worker_threads[t], NULL);
  atomic_store(&stop_signals, 1);
  pthread_join(s, NULL);
  signal(SIGUSR1, SIG_IGN);
  if (windows) set_range(NULL, NULL);
  printf("pushes=%ld starts=%ld marks=%ld handled=%ld segments=%ld\n", atomic_load(&pushes), atomic_load(&starts),
         atomic_load(&marks), atomic_load(&handled), segments);
  return 0;
}
