// String ids: two ranges of the 32-bit id space, so that an id never names two texts where
// a reader could take one for the other, however long the process records.
//
// The reader maps a process' string ids to texts per process, each segment's definitions
// collected before its events and replacing earlier ones (cc_ops/reader: tables.h,
// Decoder::CollectDefinitions). So:
//
// * Segment ids, [1, kSegmentIdsEnd): interned event messages, domain, category and thread
//   names -- texts defined again in every segment that uses them. Such an id must be unique
//   only within a segment. When the counter reaches kSegmentIdsRestart the recorder starts
//   a new segment (a new epoch) and the counter starts over at 1: an id is only ever
//   written into a segment of the cycle of the counter it came from (AllocSegmentStringId).
// * Lasting ids, [kLastingIdsBegin, 2^32): registered strings, whose handles the program
//   keeps and may use in any later segment (or a forked child); never reused. Once they
//   are all taken, a registration gets 0 (a null handle: its events carry no message).
#ifndef NVTX_PLUGINS_TF_RECORDER_STRING_IDS_H_
#define NVTX_PLUGINS_TF_RECORDER_STRING_IDS_H_

#include <stdint.h>

#include <atomic>

#include "recorder/segment_writer.h"

namespace nvtx_recorder {

constexpr uint32_t kSegmentIdsEnd = 0x80000000u;
// Ids from here on start a new segment; those up to kSegmentIdsEnd are the slack for the
// ids taken under the recorder mutex, which cannot start one (AllocSegmentStringIdLocked).
constexpr uint32_t kSegmentIdsRestart = kSegmentIdsEnd - (1u << 24);
constexpr uint32_t kLastingIdsBegin = kSegmentIdsEnd;

// (epoch that began the counter's cycle << 32) | next segment id. One word, so an id and
// its cycle are read together.
extern std::atomic<uint64_t> g_segment_string_ids;

// A segment id for a definition to be written into ts's current chunk (reserved by the
// caller just before, so ts->epoch is the segment it goes into); 0 when none is valid
// there: the counter reached its end (a new segment has been started) or began a cycle
// after ts's segment. The caller then reserves again, which moves it to the current
// segment, and retries.
inline uint32_t AllocSegmentStringId(ThreadState* ts) {
  const uint64_t w = g_segment_string_ids.fetch_add(1, std::memory_order_acquire);
  const uint32_t id = uint32_t(w);
  const uint32_t cycle_epoch = uint32_t(w >> 32);
  if (NVTXREC_LIKELY(id < kSegmentIdsRestart && int32_t(ts->epoch - cycle_epoch) >= 0)) return id;
  return 0;
}
// After AllocSegmentStringId returned 0: starts a new segment and a new cycle of ids if
// the counter is (still) at its end; returns once the epoch that goes with the counter is
// current. Takes the recorder mutex.
void RestartSegmentStringIds();

// A segment id for a definition written under RecorderMutex() into the current segment
// (the caller's stream made current under the mutex: registry records, thread names).
// Never starts a new segment; 0 when even the slack is used up.
inline uint32_t AllocSegmentStringIdLocked() {
  const uint32_t id = uint32_t(g_segment_string_ids.fetch_add(1, std::memory_order_relaxed));
  return id < kSegmentIdsEnd ? id : 0;
}

// A lasting id (registered strings); 0 once all are taken.
uint32_t AllocLastingStringId();

// inherited_string_ids of a forked child's segments: the parent's lasting ids taken so far
// (a segment id is always defined in the child's own segments).
uint32_t InheritedStringIds();

// For tests only (nvtx_recorder_test_string_ids_near_end): leaves `segment_left` segment
// ids before kSegmentIdsRestart and `lasting_left` lasting ids (0: unchanged).
void SetStringIdsNearEnd(uint32_t segment_left, uint32_t lasting_left);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_STRING_IDS_H_
