#include "tf_ops/trace_me_bridge.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "tsl/profiler/lib/traceme.h"
#include "tsl/profiler/lib/traceme_encode.h"

// TensorFlow moved these two headers from tsl/ to xla/tsl/ in two steps: 2.16-2.17 have both
// under tsl/, 2.18 has traceme_recorder.h under xla/tsl/ and time_utils.h under tsl/, 2.19 and
// later both under xla/tsl/ (docs/install.md#tested-tensorflow-versions). The namespace stayed
// ::tsl::profiler throughout.
#if __has_include("xla/tsl/profiler/backends/cpu/traceme_recorder.h")
#include "xla/tsl/profiler/backends/cpu/traceme_recorder.h"
#else
#include "tsl/profiler/backends/cpu/traceme_recorder.h"
#endif
#if __has_include("xla/tsl/profiler/utils/time_utils.h")
#include "xla/tsl/profiler/utils/time_utils.h"
#else
#include "tsl/profiler/utils/time_utils.h"
#endif

namespace nvtx_tf {
namespace {

using ::tsl::profiler::TraceMe;
using ::tsl::profiler::TraceMeRecorder;

struct OpenRange {
  std::string name;  // TraceMe name, with the metadata
  int64_t start_ns;  // TensorFlow profiler's clock
};

struct OpenActivities {
  std::mutex mu;
  std::unordered_map<uint64_t, OpenRange> by_range;  // range id -> its TraceMe event so far
  std::atomic<int64_t> count{0};                     // entries, read without the lock
  std::atomic<uint64_t> next_own_id{1};              // range ids when no NVTX tool gives one
};

OpenActivities& Open() {
  static auto* open = new OpenActivities;  // never destroyed: kernels may run at exit
  return *open;
}

}  // namespace

std::string TraceMeName(const std::string& message, const std::string& domain, bool has_payload, int64_t payload) {
  if (has_payload) {
    return ::tsl::profiler::TraceMeEncode(message, {{"domain", domain}, {"payload", payload}});
  }
  return ::tsl::profiler::TraceMeEncode(message, {{"domain", domain}});
}

uint64_t TraceMeRangeStartedTracing(uint64_t nvtx_id, const std::string& message, const std::string& domain,
                                    bool has_payload, int64_t payload) {
  OpenRange range{TraceMeName(message, domain, has_payload, payload), ::tsl::profiler::GetCurrentTimeNanos()};
  OpenActivities& open = Open();
  const uint64_t range_id =
      nvtx_id != 0 ? nvtx_id : (uint64_t(1) << 62) | open.next_own_id.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(open.mu);
  if (open.by_range.emplace(range_id, std::move(range)).second) open.count.fetch_add(1, std::memory_order_relaxed);
  return range_id;
}

void TraceMeRangeEnded(uint64_t range_id) {
  OpenActivities& open = Open();
  if (open.count.load(std::memory_order_relaxed) == 0) return;
  OpenRange range;
  {
    std::lock_guard<std::mutex> lock(open.mu);
    auto it = open.by_range.find(range_id);
    if (it == open.by_range.end()) return;
    range = std::move(it->second);
    open.by_range.erase(it);
    open.count.fetch_sub(1, std::memory_order_relaxed);
  }
  // As TraceMe::ActivityEnd: nothing once the profiler stopped (a later session drops
  // events that started before it).
  if (!TraceMe::Active()) return;
  TraceMeRecorder::Record({std::move(range.name), range.start_ns, ::tsl::profiler::GetCurrentTimeNanos()});
}

void TraceMeMarkTracing(const std::string& message, const std::string& domain, bool has_payload, int64_t payload) {
  TraceMe::InstantActivity([&] { return TraceMeName(message, domain, has_payload, payload); });
}

}  // namespace nvtx_tf
