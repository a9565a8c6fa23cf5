/* Capture windows opened and closed while other threads record (issue 20.9), run with
 * NVTX_TF_CAPTURE_RANGE=W and NVTX_TF_CAPTURE_RANGE_END=repeat: WORKERS threads push/pop,
 * start/end and mark in a loop while the main thread opens WINDOWS windows, alternately with
 * a push/pop "W" and with a start/end "W" that a closer thread ends. In the recording every
 * written event starts inside a window ([W's start, W's end]), every window is closed, and
 * every written pop and end has its push and start.
 *
 *   window_race [WORKERS] [WINDOWS]   (defaults 3 300)
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_int stop = 0;
static _Atomic unsigned long long to_close = 0;

static void* worker(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    nvtxRangePushA("work");
    nvtxMarkA("tick");
    nvtxRangeId_t id = nvtxRangeStartA("span");
    nvtxRangeEnd(id);
    nvtxRangePop();
  }
  return NULL;
}

static void* closer(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    unsigned long long id = atomic_exchange(&to_close, 0);
    if (id) nvtxRangeEnd(id);
  }
  unsigned long long id = atomic_exchange(&to_close, 0);
  if (id) nvtxRangeEnd(id);
  return NULL;
}

int main(int argc, char** argv) {
  int workers = argc > 1 ? atoi(argv[1]) : 3;
  int windows = argc > 2 ? atoi(argv[2]) : 300;
  pthread_t threads[64];
  if (workers > 64) workers = 64;
  for (int i = 0; i < workers; ++i) pthread_create(&threads[i], NULL, worker, NULL);
  pthread_t c;
  pthread_create(&c, NULL, closer, NULL);
  for (int i = 0; i < windows; ++i) {
    usleep(100);
    if (i & 1) {
      nvtxRangeId_t id = nvtxRangeStartA("W");
      usleep(100);
      atomic_store(&to_close, id);
      while (atomic_load(&to_close)) {
      }
    } else {
      nvtxRangePushA("W");
      usleep(100);
      nvtxRangePop();
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < workers; ++i) pthread_join(threads[i], NULL);
  pthread_join(c, NULL);
  return 0;
}
