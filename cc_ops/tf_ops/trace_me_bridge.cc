#include "tf_ops/trace_me_bridge.h"

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "tsl/profiler/lib/traceme.h"
#include "tsl/profiler/lib/traceme_encode.h"

namespace nvtx_tf {
namespace {

using ::tsl::profiler::TraceMe;

struct OpenActivities {
  std::mutex mu;
  std::unordered_map<uint64_t, int64_t> by_range;  // range id -> TraceMe activity id
  std::atomic<int64_t> count{0};                   // entries, read without the lock
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

uint64_t TraceMeRangeStarted(uint64_t nvtx_id, const std::string& message, const std::string& domain, bool has_payload,
                             int64_t payload) {
  if (!TraceMe::Active()) return nvtx_id;
  const int64_t activity = TraceMe::ActivityStart([&] { return TraceMeName(message, domain, has_payload, payload); });
  if (activity == 0) return nvtx_id;
  const uint64_t range_id = nvtx_id != 0 ? nvtx_id : static_cast<uint64_t>(activity);
  OpenActivities& open = Open();
  std::lock_guard<std::mutex> lock(open.mu);
  if (open.by_range.emplace(range_id, activity).second) open.count.fetch_add(1, std::memory_order_relaxed);
  return range_id;
}

void TraceMeRangeEnded(uint64_t range_id) {
  OpenActivities& open = Open();
  if (open.count.load(std::memory_order_relaxed) == 0) return;
  int64_t activity = 0;
  {
    std::lock_guard<std::mutex> lock(open.mu);
    auto it = open.by_range.find(range_id);
    if (it == open.by_range.end()) return;
    activity = it->second;
    open.by_range.erase(it);
    open.count.fetch_sub(1, std::memory_order_relaxed);
  }
  TraceMe::ActivityEnd(activity);
}

void TraceMeMark(const std::string& message, const std::string& domain, bool has_payload, int64_t payload) {
  if (!TraceMe::Active()) return;
  TraceMe::InstantActivity([&] { return TraceMeName(message, domain, has_payload, payload); });
}

}  // namespace nvtx_tf
