// Control API, used from Python through ctypes on the same library instance that NVTX
// loaded (ctypes.CDLL on the same path returns it).
#include <atomic>

#include "recorder/config.h"
#include "recorder/recorder_internal.h"
#include "recorder/segment_writer.h"
#include "recorder/thread_lifetime.h"

namespace nvtx_recorder {
extern std::atomic<int> g_attach_count;
}  // namespace nvtx_recorder

// Number of successful InitializeInjectionNvtx2 calls in this process.
NVTXREC_EXPORT int nvtx_recorder_attached(void) {
  return nvtx_recorder::g_attach_count.load(std::memory_order_relaxed);
}

// Switches the process to recording into `dir` (created if needed): every thread's next
// event goes into a new segment there. 0 on success, -1 with errno set otherwise.
NVTXREC_EXPORT int nvtx_recorder_set_output_dir(const char* dir) { return nvtx_recorder::SetOutputDir(dir); }

// Current recording directory (absolute), "" when none. The pointer stays valid.
NVTXREC_EXPORT const char* nvtx_recorder_output_dir(void) { return nvtx_recorder::OutputDir(); }

// Events (push, pop, start, end, mark) recorded so far by this process.
NVTXREC_EXPORT uint64_t nvtx_recorder_event_count(void) { return nvtx_recorder::EventCount(); }

// Events this process could not record (also counted in its segments' headers).
NVTXREC_EXPORT uint64_t nvtx_recorder_dropped_count(void) { return nvtx_recorder::DroppedCount(); }

// Keeps the output directory and starts a new segment there for every thread's next
// event: the way to delimit a window of the recording (nvtx_plugins_tf.testing.capture
// reads the segments opened between two calls) without taking anything away from it.
// Returns the CLOCK_MONOTONIC time of the switch (segments opened afterwards have a
// larger start_ns), 0 when there is no output directory.
NVTXREC_EXPORT uint64_t nvtx_recorder_new_segment(void) { return nvtx_recorder::NewSegment(); }
