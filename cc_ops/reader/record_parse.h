// Parsing one record of a chunk (format/record_format.h) from a bounds-checked buffer.
// Knows the byte layout of records and nothing about what they mean for a recording.
#ifndef NVTX_PLUGINS_TF_READER_RECORD_PARSE_H_
#define NVTX_PLUGINS_TF_READER_RECORD_PARSE_H_

#include <stdint.h>
#include <string.h>

#include <string_view>

#include "format/record_format.h"

namespace nvtx_reader {

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
inline uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

// An event record's kind, full or compact (record_format.h).
inline bool IsEventKind(uint8_t kind) {
  return nvtx_record::IsFullEventKind(kind) || nvtx_record::IsCompactEventKind(kind);
}

// The chunk's clock (record_format.h, compact events) as a walk through a chunk's records
// keeps it: reset at each chunk's start and after damage skipped inside a chunk.
struct ChunkClock {
  uint64_t last = 0;   // timestamp of the chunk's previous event record ...
  bool known = false;  // ... if there was one since the start or the damage
  void Reset() { known = false; }
};

// One record, its fields named. Only the fields of its kind are set.
struct Record {
  uint8_t kind = 0;  // a compact event's full kind (kRangePush .. kMark)
  bool compact = false;
  bool ts_known = true;  // false: a compact event the chunk's clock cannot date (damage)
  uint8_t flags = 0;
  uint32_t domain = 0;  // process-local domain id
  uint32_t msg = 0;     // process-local string id
  // Events (and the timestamp of kDomainCreate / kDomainDestroy).
  int64_t ts = 0;
  uint64_t range_id = 0;
  uint32_t color = 0;
  uint32_t category = 0;  // also kCategoryName's category number
  uint64_t payload = 0;
  uint8_t payload_type = 0;        // PayloadType
  const uint8_t* block = nullptr;  // kPayloadExt: the payload block, `payload` bytes
  // Definitions.
  std::string_view text;  // kStringDef, kPayloadSchema (its body)
  int64_t tid = 0;        // kThreadName
};

// RecordLength of a record that is not a compact event.
uint64_t FullRecordLength(const uint8_t* p, uint64_t remaining);

// Length of the record at p (`remaining` bytes available, at least 8); 0 when it is
// damaged (unknown kind or payload type, or longer than what is available).
inline uint64_t RecordLength(const uint8_t* p, uint64_t remaining) {
  using namespace nvtx_record;
  uint8_t kind = p[0];  // (word 0's low byte)
  if (!IsCompactEventKind(kind)) return FullRecordLength(p, remaining);
  const uint8_t full = kind - kCompactKindOffset;
  uint64_t len = full == kRangeStart || full == kRangeEnd ? 16 : 8;
  return len <= remaining ? len : 0;
}

// ParseRecord of a record that is not a compact event.
Record ParseFullRecord(const uint8_t* p, ChunkClock* clock);

// Fields of the record at p, whose length RecordLength() returned; an event record moves
// `clock` (the walk's clock of p's chunk) on and a compact one is dated by it. (Inline:
// most of a recording's records are compact events, and a caller reads few of the fields.)
inline Record ParseRecord(const uint8_t* p, ChunkClock* clock) {
  using namespace nvtx_record;
  uint64_t w0 = Load64(p);
  uint8_t kind = static_cast<uint8_t>(w0 & 0xff);
  if (!IsCompactEventKind(kind)) return ParseFullRecord(p, clock);
  Record r;
  r.kind = kind - kCompactKindOffset;
  r.compact = true;
  r.domain = CompactDomain(w0);
  r.msg = CompactMsg(w0);
  r.ts_known = clock->known;
  if (clock->known) {
    clock->last += CompactDelta(w0);  // (wraps like the u64 timestamps do)
    r.ts = static_cast<int64_t>(clock->last);
  }
  if (r.kind == kRangeStart || r.kind == kRangeEnd) r.range_id = Load64(p + 8);
  return r;
}

// Moves the record at p (whose length RecordLength() returned) onto another clock and
// process, in place: adds shift_ns to its timestamp (full event records, kDomainCreate,
// kDomainDestroy; a compact event's delta stays as it is: its chunk's clock moves with
// the full events it counts from) and makes a kThreadName that names thread old_tid name new_tid.
// Every other byte is kept (nvtx-tf merge; see nvtxr_rewrite_chunk in decode.h).
void RebaseRecord(uint8_t* p, int64_t shift_ns, int64_t old_tid, int64_t new_tid);

enum class ChunkWalk { kEnd, kDamage };

// The one walk through the records of a chunk's bytes [0, n): calls f(p, len) for each
// record from kChunkHeaderSize on, up to the chunk's first zero word or its end (kEnd),
// or its first damaged record (kDamage; the records before it were visited). The chunk
// header is not checked here. Byte is uint8_t or const uint8_t.
template <class Byte, class F>
ChunkWalk ForEachRecordIn(Byte* chunk, uint64_t n, F f) {
  uint64_t pos = nvtx_record::kChunkHeaderSize;
  while (pos + 8 <= n) {
    Byte* r = chunk + pos;
    if (Load64(r) == 0) break;
    uint64_t len = RecordLength(r, n - pos);
    if (len == 0) return ChunkWalk::kDamage;
    f(r, len);
    pos += len;
  }
  return ChunkWalk::kEnd;
}

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_RECORD_PARSE_H_
