// One decoder context (the void* of the C API in decode.h): reads segments one after
// the other (oldest first) and hands out rows. Ties together the tables (tables.h), the
// segment being read (segment_cursor.h) and the range matcher (range_matcher.h).
//
// Names never depend on the order of the chunks: before a segment's events are decoded,
// every definition record of the segment is collected (CollectDefinitions). Each event
// record is then parsed (record_parse.h), turned into a row and matched (MatchEvent);
// the other definitions are applied to the tables (ApplyDefinition).
#ifndef NVTX_PLUGINS_TF_READER_DECODER_H_
#define NVTX_PLUGINS_TF_READER_DECODER_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "reader/decode.h"
#include "reader/payload_json.h"
#include "reader/range_matcher.h"
#include "reader/record_parse.h"
#include "reader/segment_cursor.h"
#include "reader/tables.h"

namespace nvtx_reader {

class Decoder {
 public:
  Decoder() : cursor_(stats_), matcher_(stats_) {}

  // See nvtxr_open_segment.
  int Open(const char* path, std::string* error);
  void CloseSegment();
  // Info of the open segment; false when none is open (or after Finish).
  bool SegmentInfo(NvtxrSegmentInfo* out) const;
  int64_t Next(NvtxrRow* rows, int64_t capacity);
  void Finish();

  const NvtxrStats& stats() const { return stats_; }
  const Tables& tables() const { return tables_; }

 private:
  enum Phase { kIdle, kRecords, kDone, kFlush };

  void CollectDefinitions();
  // Decodes the next record of the current chunk; true if it wrote a row into *row.
  bool Step(NvtxrRow* row);
  bool MatchEvent(const Record& r, NvtxrRow* row);
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
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_DECODER_H_
