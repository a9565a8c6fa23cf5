// One decoder context (the void* of the C API in decode.h): reads segments one after
// the other (oldest first) and hands out rows. Ties together the tables (tables.h), the
// segment being read (segment_cursor.h) and the range matcher (range_matcher.h).
//
// Names never depend on the order of the chunks: before a segment's events are decoded,
// every definition record of the segment is collected (CollectDefinitions). Each event
// record is then parsed (record_parse.h), turned into a row and matched (MatchEvent);
// the other definitions are applied to the tables (ApplyDefinition). analyze reads the
// same rows through NextRanges, into its columns (range_columns.h).
#ifndef NVTX_PLUGINS_TF_READER_DECODER_H_
#define NVTX_PLUGINS_TF_READER_DECODER_H_

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "reader/decode.h"
#include "reader/payload_json.h"
#include "reader/range_matcher.h"
#include "reader/record_parse.h"
#include "reader/segment_cursor.h"
#include "reader/tables.h"

namespace nvtx_reader {

struct RangeColumns;

class Decoder {
 public:
  Decoder() : cursor_(stats_), matcher_(stats_) {}

  // See nvtxr_open_segment (`packed`: nvtxr_open_packed).
  int Open(const char* path, bool packed, uint64_t cache_bytes, std::string* error, bool live = false);
  const std::vector<NvtxrUnpackDamage>& unpack_damage() const { return cursor_.unpack_damage(); }
  // A live read (watch's: segment_cursor.h, SegmentCursor::OpenLive): a raw segment opened
  // to be read again while it is written. Read it (NextRanges) to its end, then Resume and
  // read the records written since, and so on; never Finish (its ranges still open stay
  // open, on the stacks). Resume returns 0, or -1 when the segment cannot be taken up (not
  // live, damage, another segment in its place: read it whole). LiveFailed: damage met in the
  // last read (its rows are not to be kept).
  int OpenLive(const char* path, std::string* error);
  int Resume(std::string* error);
  bool LiveFailed() const { return cursor_.failed(); }
  void CloseSegment();
  // Info of the open segment; false when none is open (or after Finish).
  bool SegmentInfo(NvtxrSegmentInfo* out) const;
  int64_t Next(NvtxrRow* rows, int64_t capacity);
  // analyze's reading (range_columns.h): the same rows as Next, straight into `out`'s
  // columns; how many (0: done). The push/pop ranges are matched on stacks of what the
  // columns keep of them (OpenPush), not of whole rows. A decoder is read one way or the
  // other, not both.
  int64_t NextRanges(RangeColumns* out, int64_t capacity);
  void Finish();

  const NvtxrStats& stats() const { return stats_; }
  const Tables& tables() const { return tables_; }

 private:
  enum Phase { kIdle, kRecords, kDone, kFlush };

  void CollectDefinitions();
  // Decodes the next record of the current chunk; true if it wrote a row into *row.
  bool Step(NvtxrRow* row);
  bool MatchEvent(const Record& r, NvtxrRow* row);
  // An event's message (global string index; 0 and counted when unknown, *unknown set)
  // and payload (kPayloadExt: the interned JSON text's index).
  uint32_t EventMessage(const Record& r, bool* unknown);
  uint64_t EventPayload(const Record& r);
  // NextRanges' step: as Step, the push/pop ranges matched on push_stacks_ (RangeEvent).
  bool StepRanges(RangeColumns* out);
  bool RangeEvent(const Record& r, RangeColumns* out);
  template <class OnEvent>
  bool DecodeRecord(OnEvent on_event);
  template <class StepFn, class FlushFn>
  int64_t Drain(int64_t capacity, StepFn step, FlushFn flush);

  // A push/pop range still open, as NextRanges keeps it.
  struct OpenPush {
    int64_t start, pid, tid;
    uint32_t message, domain;
  };
  // The stack of a (thread, domain) of the open segment's process (the last one remembered:
  // a thread's events come in runs of one stack).
  std::vector<OpenPush>& PushStack(uint64_t stack) {
    if (last_stack_ && proc_ == last_stack_proc_ && stack == last_stack_key_) return *last_stack_;
    return FindPushStack(stack);
  }
  std::vector<OpenPush>& FindPushStack(uint64_t stack);
  void ApplyDefinition(const Record& r);

  NvtxrStats stats_{};
  Tables tables_;
  PayloadSchemas schemas_;  // payload extension: schemas and enums per process and domain
  SegmentCursor cursor_;
  RangeMatcher matcher_;
  Phase phase_ = kIdle;
  int proc_ = -1;                  // process of the open segment
  std::vector<NvtxrRow> pending_;  // after Finish: the ranges left open
  size_t pending_pos_ = 0;
  // NextRanges' push/pop stacks, per process (Tables::Process numbering), and the last one
  std::deque<std::unordered_map<uint64_t, std::vector<OpenPush>>> push_stacks_;
  std::vector<OpenPush>* last_stack_ = nullptr;
  int last_stack_proc_ = -1;
  uint64_t last_stack_key_ = 0;
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_DECODER_H_
