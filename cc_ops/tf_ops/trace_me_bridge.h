// Our ranges in TensorFlow's own profiler: each NVTX range and mark of the ops is also a
// TraceMe activity, so while tf.profiler.experimental (or TensorBoard's profiler callback)
// traces, the host plane of its .xplane.pb holds them, once per execution, on the thread
// that ran them. With TensorFlow's profiler off this costs one relaxed load per op.
//
// The kernels pass only the NVTX range id from NvtxStart to NvtxEnd. While ranges are open
// under TensorFlow's profiler, a small table maps the range id to the range's TraceMe name
// and start time; NvtxEnd records one complete TraceMe event (TraceMeRecorder::Record, as
// TraceMe's destructor does), on the thread that ends the range. Not TraceMe's split
// ActivityStart/ActivityEnd: when start and end run on different threads, TensorFlow
// merges the two halves at profiler stop through pointers into a vector that may have
// moved, and the event is sometimes lost (seen as 1 range in ~16 runs missing from the
// .xplane.pb). Without an NVTX tool, NVTX returns range id 0; a counter of our own then
// gives the range id (NVTX ignores the end of a range id no tool gave out).
#ifndef NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_
#define NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_

#include <cstdint>
#include <string>

#include "tsl/profiler/lib/traceme.h"

namespace nvtx_tf {

// The TraceMe name of a range: `message`, with the domain and payload as TraceMe metadata.
std::string TraceMeName(const std::string& message, const std::string& domain, bool has_payload, int64_t payload);

// While TensorFlow's profiler traces (the slow halves of the calls below).
uint64_t TraceMeRangeStartedTracing(uint64_t nvtx_id, const std::string& message, const std::string& domain,
                                    bool has_payload, int64_t payload);
void TraceMeMarkTracing(const std::string& message, const std::string& domain, bool has_payload, int64_t payload);

// Called after nvtxDomainRangeStartEx returned `nvtx_id`; returns the range id to hand
// to NvtxEnd (nvtx_id, or one of ours when nvtx_id is 0 and the profiler traces). Inline:
// with the profiler off, one atomic load and no call.
inline uint64_t TraceMeRangeStarted(uint64_t nvtx_id, const std::string& message, const std::string& domain,
                                    bool has_payload, int64_t payload) {
  if (!::tsl::profiler::TraceMe::Active()) return nvtx_id;
  return TraceMeRangeStartedTracing(nvtx_id, message, domain, has_payload, payload);
}

// Called when NvtxEnd ends `range_id` (also after the profiler stopped: a range may
// outlive the session).
void TraceMeRangeEnded(uint64_t range_id);

// An instant activity for a mark.
inline void TraceMeMark(const std::string& message, const std::string& domain, bool has_payload, int64_t payload) {
  if (::tsl::profiler::TraceMe::Active()) TraceMeMarkTracing(message, domain, has_payload, payload);
}

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_
