// Our ranges in TensorFlow's own profiler: each NVTX range and mark of the ops is also a
// TraceMe activity, so while tf.profiler.experimental (or TensorBoard's profiler callback)
// traces, the host plane of its .xplane.pb holds them, once per execution, on the thread
// that ran them. With TensorFlow's profiler off this costs one relaxed load per op.
//
// A TraceMe activity is paired by its activity id, an NVTX range by its range id; the
// kernels pass only the NVTX range id from NvtxStart to NvtxEnd. While activities are
// open, a small table maps the range id to its activity id. Without an NVTX tool, NVTX
// returns range id 0; the activity id then stands in as the range id (NVTX ignores the
// end of a range id no tool gave out).
#ifndef NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_
#define NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_

#include <cstdint>
#include <string>

namespace nvtx_tf {

// The TraceMe name of a range: `message`, with the domain and payload as TraceMe metadata.
std::string TraceMeName(const std::string& message, const std::string& domain, bool has_payload, int64_t payload);

// Called after nvtxDomainRangeStartEx returned `nvtx_id`; returns the range id to hand
// to NvtxEnd (nvtx_id, or the activity id when nvtx_id is 0 and the profiler traces).
uint64_t TraceMeRangeStarted(uint64_t nvtx_id, const std::string& message, const std::string& domain, bool has_payload,
                             int64_t payload);

// Called when NvtxEnd ends `range_id`.
void TraceMeRangeEnded(uint64_t range_id);

// An instant activity for a mark.
void TraceMeMark(const std::string& message, const std::string& domain, bool has_payload, int64_t payload);

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_TRACE_ME_BRIDGE_H_
