#include "reader/record_parse.h"

namespace nvtx_reader {

using namespace nvtx_record;

namespace {

inline uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t(7); }
inline uint8_t KindOf(uint64_t w0) { return static_cast<uint8_t>(w0 & 0xff); }
inline uint8_t FlagsOf(uint64_t w0) { return static_cast<uint8_t>((w0 >> 8) & 0xff); }
inline uint8_t PayloadTypeOf(uint8_t flags) { return (flags & kPayloadMask) >> kPayloadShift; }
// The field after word 0: the timestamp of events and of kDomainCreate/kDomainDestroy,
// kThreadName's tid, the byte length of kStringDef and kPayloadSchema.
constexpr uint64_t kFirstField = 8;
inline bool HasTimestamp(uint8_t kind) {
  return IsFullEventKind(kind) || kind == kDomainCreate || kind == kDomainDestroy;
}

}  // namespace

uint64_t FullRecordLength(const uint8_t* p, uint64_t remaining) {
  uint64_t w0 = Load64(p);
  uint8_t kind = KindOf(w0);
  uint8_t flags = FlagsOf(w0);
  uint64_t len = 0;
  if (IsFullEventKind(kind)) {
    uint8_t payload_type = PayloadTypeOf(flags);
    if (payload_type > kPayloadExt) return 0;
    bool has_range_id = kind == kRangeStart || kind == kRangeEnd;
    bool has_attrs = (flags & (kFlagColor | kFlagCategory)) != 0;
    len = 16 + (has_range_id ? 8 : 0) + (has_attrs ? 8 : 0) + (payload_type ? 8 : 0);
    if (payload_type == kPayloadExt) {  // the payload block follows (its length in payload)
      if (len > remaining) return 0;
      uint64_t block = Load64(p + len - 8);
      if (block > remaining - len || Pad8(block) > remaining - len) return 0;
      len += Pad8(block);
    }
  } else if (kind == kStringDef || kind == kPayloadSchema) {
    if (remaining < 16) return 0;
    len = 16 + Pad8(Load32(p + kFirstField));
  } else if (kind == kDomainCreate || kind == kDomainDestroy || kind == kCategoryName || kind == kThreadName) {
    len = 16;
  } else {
    return 0;
  }
  return len <= remaining ? len : 0;
}

Record ParseFullRecord(const uint8_t* p, ChunkClock* clock) {
  uint64_t w0 = Load64(p);
  Record r;
  r.kind = KindOf(w0);
  r.flags = FlagsOf(w0);
  r.domain = static_cast<uint32_t>((w0 >> 16) & 0xffff);
  r.msg = static_cast<uint32_t>(w0 >> 32);
  const uint8_t* q = p + kFirstField;
  if (IsFullEventKind(r.kind)) {
    r.payload_type = PayloadTypeOf(r.flags);
    r.ts = static_cast<int64_t>(Load64(q));
    clock->last = static_cast<uint64_t>(r.ts);
    clock->known = true;
    q += 8;
    if (r.kind == kRangeStart || r.kind == kRangeEnd) {
      r.range_id = Load64(q);
      q += 8;
    }
    if (r.flags & (kFlagColor | kFlagCategory)) {
      r.color = Load32(q);
      r.category = Load32(q + 4);
      q += 8;
    }
    if (r.payload_type) r.payload = Load64(q);
    if (r.payload_type == kPayloadExt) r.block = q + 8;
    return r;
  }
  switch (r.kind) {
    case kStringDef:
    case kPayloadSchema:
      r.text = std::string_view(reinterpret_cast<const char*>(p + 16), Load32(q));
      break;
    case kDomainCreate:
    case kDomainDestroy:
      r.ts = static_cast<int64_t>(Load64(q));
      break;
    case kCategoryName:
      r.category = Load32(q);
      break;
    case kThreadName:
      r.tid = static_cast<int64_t>(Load64(q));
      break;
    default:
      break;
  }
  return r;
}

void RebaseRecord(uint8_t* p, int64_t shift_ns, int64_t old_tid, int64_t new_tid) {
  uint8_t kind = KindOf(Load64(p));
  uint8_t* field = p + kFirstField;
  if (HasTimestamp(kind)) {
    uint64_t ts = Load64(field) + static_cast<uint64_t>(shift_ns);  // (wraps like the u64 it is)
    memcpy(field, &ts, 8);
  } else if (kind == kThreadName && static_cast<int64_t>(Load64(field)) == old_tid) {
    memcpy(field, &new_tid, 8);
  }
}

}  // namespace nvtx_reader
