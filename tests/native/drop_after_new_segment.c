/* Drops counted after `nvtx_recorder_new_segment()` while no segment of the new epoch is open
 * yet (it opens at the next write): THREADS threads each mark once, the main thread starts a
 * new segment, then each thread exits, and a key destructor that runs after the recorder's
 * own (a later key) marks "late": the thread's recorder state is gone, so the event is
 * dropped and counted. Nothing writes after, so no segment of the new epoch is ever opened.
 * Prints "dropped=N" (the recorder's own count); the segments' headers must hold the same.
 *
 *   drop_after_new_segment [THREADS]   (default 4)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_key_t late_key;
static pthread_barrier_t marked, rotated;

static void late(void* value) {
  (void)value;
  nvtxMarkA("late"); /* after the recorder's thread state was torn down: dropped, counted */
}

static void* worker(void* arg) {
  (void)arg;
  nvtxMarkA("early"); /* the thread's recorder state (and its exit key) exist from here */
  pthread_setspecific(late_key, (void*)1);
  pthread_barrier_wait(&marked);
  pthread_barrier_wait(&rotated);
  return NULL;
}

int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 4;
  nvtxMarkA("start"); /* the recorder's runtime, and its thread-exit key, before ours */
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  uint64_t (*new_segment)(void) = lib ? (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_new_segment") : NULL;
  uint64_t (*dropped)(void) = lib ? (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_dropped_count") : NULL;
  if (!new_segment || !dropped) {
    fprintf(stderr, "drop_after_new_segment: the recorder's control API is not there\n");
    return 3;
  }
  pthread_key_create(&late_key, late);
  pthread_barrier_init(&marked, NULL, (unsigned)threads + 1);
  pthread_barrier_init(&rotated, NULL, (unsigned)threads + 1);
  pthread_t tid[64];
  if (threads < 1 || threads > 64) return 2;
  for (int t = 0; t < threads; ++t) pthread_create(&tid[t], NULL, worker, NULL);
  pthread_barrier_wait(&marked);
  new_segment();
  pthread_barrier_wait(&rotated);
  for (int t = 0; t < threads; ++t) pthread_join(tid[t], NULL);
  printf("dropped=%llu\n", (unsigned long long)dropped());
  return 0;
}
