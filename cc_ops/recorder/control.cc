// Control API, used from Python through ctypes on the same library instance that NVTX
// loaded (ctypes.CDLL on the same path returns it).
#include <errno.h>

#include <atomic>

#include "recorder/config.h"
#include "recorder/gate.h"
#include "recorder/recorder_internal.h"
#include "recorder/segment_writer.h"
#include "recorder/string_ids.h"
#include "recorder/thread_lifetime.h"

namespace nvtx_recorder {
extern std::atomic<int> g_attach_count;
}  // namespace nvtx_recorder

// The calls that take the recorder mutex hold an EntryGuard (segment_writer.h): an NVTX
// event from a signal handler that interrupts one of them is dropped, never run inside
// the half-done call; such a call made from a handler that interrupted an NVTX call
// fails (EBUSY, or 0 / "").
#define NVTXREC_CONTROL(fallback)  \
  nvtx_recorder::EntryGuard guard; \
  if (guard.reentered()) {         \
    errno = EBUSY;                 \
    return fallback;               \
  }                                \
  static_assert(true, "")

// Number of successful InitializeInjectionNvtx2 calls in this process.
NVTXREC_EXPORT int nvtx_recorder_attached(void) {
  return nvtx_recorder::g_attach_count.load(std::memory_order_relaxed);
}

// Switches the process to recording into `dir` (created if needed): every thread's next
// event goes into a new segment there. 0 on success, -1 with errno set otherwise.
NVTXREC_EXPORT int nvtx_recorder_set_output_dir(const char* dir) {
  NVTXREC_CONTROL(-1);
  return nvtx_recorder::SetOutputDir(dir);
}

// Current recording directory (absolute), "" when none. The pointer stays valid.
NVTXREC_EXPORT const char* nvtx_recorder_output_dir(void) {
  NVTXREC_CONTROL("");
  return nvtx_recorder::OutputDir();
}

// Events (push, pop, start, end, mark) recorded so far by this process.
NVTXREC_EXPORT uint64_t nvtx_recorder_event_count(void) {
  NVTXREC_CONTROL(0);
  return nvtx_recorder::EventCount();
}

// Events this process could not record (also counted in its segments' headers).
NVTXREC_EXPORT uint64_t nvtx_recorder_dropped_count(void) { return nvtx_recorder::DroppedCount(); }

// Keeps the output directory and starts a new segment there for every thread's next
// event: the way to delimit a window of the recording (nvtx_plugins_tf.testing.capture
// reads the segments opened between two calls) without taking anything away from it.
// Returns the CLOCK_MONOTONIC time of the switch (segments opened afterwards have a
// larger start_ns), 0 when there is no output directory.
NVTXREC_EXPORT uint64_t nvtx_recorder_new_segment(void) {
  NVTXREC_CONTROL(0);
  return nvtx_recorder::NewSegment();
}

// Sets the capture range (as NVTX_TF_CAPTURE_RANGE: "NAME", "NAME@DOMAIN" or "NAME@*")
// and its end mode ("stop" (null), "none", "repeat" or "repeat:N"); from then on only
// events inside its windows are written (see gate.h). A null or empty `range` clears it:
// everything is written again. 0 on success, -1 with errno EINVAL on a bad value.
NVTXREC_EXPORT int nvtx_recorder_set_capture_range(const char* range, const char* end) {
  NVTXREC_CONTROL(-1);
  return nvtx_recorder::SetCaptureRange(range, end);
}

// Capture windows opened since the capture range was set.
NVTXREC_EXPORT uint64_t nvtx_recorder_capture_windows(void) { return nvtx_recorder::CaptureWindowsOpened(); }

// 1 while a capture window is open, else 0 (also 0 when no capture range is set).
NVTXREC_EXPORT int nvtx_recorder_capture_window_open(void) { return nvtx_recorder::CaptureWindowOpen() ? 1 : 0; }

// The recorder's clock (clock.h): "tsc" (the CPU's counter, converted to CLOCK_MONOTONIC
// nanoseconds) or "monotonic" (clock_gettime).
NVTXREC_EXPORT const char* nvtx_recorder_clock_source(void) {
  return nvtx_recorder::CurrentClockSource() == nvtx_recorder::kClockTsc ? "tsc" : "monotonic";
}

// The recorder's clock now, CLOCK_MONOTONIC nanoseconds, as it stamps events.
NVTXREC_EXPORT uint64_t nvtx_recorder_now_ns(void) { return nvtx_recorder::NowNs(); }

// For tests only: moves the string id counters (string_ids.h) near their ends, so that a
// test reaches them without billions of calls: `segment_left` segment ids (interned
// messages, names) remain before the recorder starts a new segment and counts them from 1
// again, `lasting_left` lasting ids (registered strings) before registrations get null
// handles. 0 leaves a counter as it is.
NVTXREC_EXPORT void nvtx_recorder_test_string_ids_near_end(uint32_t segment_left, uint32_t lasting_left) {
  nvtx_recorder::SetStringIdsNearEnd(segment_left, lasting_left);
}
