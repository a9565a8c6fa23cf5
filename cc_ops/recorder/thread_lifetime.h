// Lifetime of the recorder in a process: the thread states (created on a thread's first
// event, freed at its exit through a pthread key), the list of live ones, fork handling,
// and pinning the library so that neither outlives its code.
#ifndef NVTX_PLUGINS_TF_RECORDER_THREAD_LIFETIME_H_
#define NVTX_PLUGINS_TF_RECORDER_THREAD_LIFETIME_H_

#include <stdint.h>

namespace nvtx_recorder {

// Registers fork handlers / thread-exit key and pins the library (idempotent).
void EnsureRuntime();
// Events recorded by this process so far (live and exited threads).
uint64_t EventCount();

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_THREAD_LIFETIME_H_
