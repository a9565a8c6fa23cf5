/* Start/end ranges handed over between two threads (issue 20.1, ../shared/repros/clk_pp.c):
 * thread A starts a range and hands its id to thread B through a release store; B takes it
 * with an acquire exchange and ends it. The start happens before the end, so the recording
 * must never show an end before its start.
 *
 *   handoff_ranges [RANGES]
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic unsigned long long box[2];
static int ranges = 200000;

static void* run(void* arg) {
  long me = (long)arg;
  for (int i = 0; i < ranges; ++i) {
    if (me == (i & 1)) {
      nvtxRangeId_t id = nvtxRangeStartA("handed over");
      atomic_store_explicit(&box[1 - me], id, memory_order_release);
    } else {
      unsigned long long id;
      while (!(id = atomic_exchange_explicit(&box[me], 0, memory_order_acquire))) {
      }
      nvtxRangeEnd(id);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) ranges = atoi(argv[1]);
  nvtxMarkA("init");
  pthread_t a, b;
  pthread_create(&a, NULL, run, (void*)0);
  pthread_create(&b, NULL, run, (void*)1);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return 0;
}
