// String id ranges and their counters. See string_ids.h.
#include "recorder/string_ids.h"

namespace nvtx_recorder {

// Cycle of epoch 1 (g_epoch's first value), next id 1.
std::atomic<uint64_t> g_segment_string_ids{(uint64_t(1) << 32) | 1};

namespace {
std::atomic<uint64_t> g_next_lasting_id{kLastingIdsBegin};  // 64 bits: never wraps
}  // namespace

void RestartSegmentStringIds() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  const uint64_t w = g_segment_string_ids.load(std::memory_order_relaxed);
  if (uint32_t(w) < kSegmentIdsRestart) return;  // another thread restarted it already
  // The counter's new cycle is stored before the epoch changes: a thread that sees the
  // new epoch (a later segment) takes its ids from the new cycle, and one that takes an id
  // of the new cycle while still in an older segment is refused (AllocSegmentStringId)
  // and finds the new epoch once it has this mutex.
  uint32_t next = g_epoch.load(std::memory_order_relaxed) + 1;
  if (next == 0) next = 1;  // as StartNewEpochLocked numbers epochs
  g_segment_string_ids.store((uint64_t(next) << 32) | 1, std::memory_order_release);
  StartNewEpochLocked();
}

uint32_t AllocLastingStringId() {
  const uint64_t id = g_next_lasting_id.fetch_add(1, std::memory_order_relaxed);
  return id <= UINT32_MAX ? uint32_t(id) : 0;
}

uint32_t InheritedStringIds() {
  const uint64_t next = g_next_lasting_id.load(std::memory_order_relaxed);
  return next <= UINT32_MAX ? uint32_t(next) : UINT32_MAX;
}

void SetStringIdsNearEnd(uint32_t segment_left, uint32_t lasting_left) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (segment_left != 0 && segment_left < kSegmentIdsRestart) {
    const uint64_t w = g_segment_string_ids.load(std::memory_order_relaxed);
    g_segment_string_ids.store((w & ~uint64_t(UINT32_MAX)) | (kSegmentIdsRestart - segment_left),
                               std::memory_order_relaxed);
  }
  if (lasting_left != 0 && lasting_left <= UINT32_MAX - kLastingIdsBegin) {
    g_next_lasting_id.store(uint64_t(UINT32_MAX) + 1 - lasting_left, std::memory_order_relaxed);
  }
}

}  // namespace nvtx_recorder
