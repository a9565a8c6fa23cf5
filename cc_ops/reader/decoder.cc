#include "reader/decoder.h"

#include <string.h>

#include <algorithm>

#include "reader/range_columns.h"

namespace nvtx_reader {

using namespace nvtx_record;

int Decoder::OpenLive(const char* path, std::string* error) { return Open(path, false, 0, error, /*live=*/true); }

int Decoder::Resume(std::string* error) {
  if (!cursor_.live() || proc_ < 0 || (phase_ != kDone && phase_ != kRecords)) return -1;
  if (cursor_.Resume(error) != 0) return -1;
  try {
    CollectDefinitions();  // (of the records past where each chunk's last read stopped)
  } catch (...) {
    *error = "out of memory";
    return -1;
  }
  phase_ = kRecords;
  return 0;
}

int Decoder::Open(const char* path, bool packed, uint64_t cache_bytes, std::string* error, bool live) {
  CloseSegment();
  phase_ = kIdle;
  int rc = live ? cursor_.OpenLive(path, error) : cursor_.Open(path, packed, cache_bytes, error);
  if (rc != 0) return rc;
  const SegmentHeader& h = cursor_.header();
  // The process this segment belongs to (older writers: every segment on its own).
  uint64_t identity = h.process_start_ns ? h.process_start_ns : ~cursor_.segment_no();
  proc_ = tables_.Process(h.pid, identity, h.parent_pid, h.parent_process_start_ns, h.inherited_string_ids);
  try {
    CollectDefinitions();
  } catch (...) {
    CloseSegment();
    stats_.unreadable_segments++;
    *error = std::string("out of memory reading ") + path;
    return -1;
  }
  stats_.segments++;
  phase_ = kRecords;
  return 0;
}

void Decoder::CloseSegment() {
  cursor_.Close();
  if (phase_ != kFlush) phase_ = kIdle;
  proc_ = -1;
}

bool Decoder::SegmentInfo(NvtxrSegmentInfo* out) const {
  if (phase_ != kRecords && phase_ != kDone) return false;
  *out = cursor_.info();
  return true;
}

// First pass: every string and domain definition of the segment, so that no name
// depends on which thread's chunk is decoded first (a registered string or a domain
// is defined only in the stream of the thread that registered or created it). Damage
// ends a chunk here without being counted: the second pass counts it.
void Decoder::CollectDefinitions() {
  std::vector<std::pair<uint32_t, uint32_t>> creates;  // (local domain, name id)
  ChunkClock clock;                                    // (times are not needed here)
  cursor_.ForEachRecord([&](const uint8_t* p, uint64_t) {
    uint8_t kind = p[0];  // (word 0's low byte: parse only the definitions wanted here)
    if (kind != kStringDef && kind != kDomainCreate && kind != kPayloadSchema) return;
    Record r = ParseRecord(p, &clock);
    if (r.kind == kStringDef) {
      tables_.DefineString(proc_, r.msg, tables_.Intern(r.text));
    } else if (r.kind == kDomainCreate) {
      creates.emplace_back(r.domain, r.msg);
    } else if (r.kind == kPayloadSchema) {
      schemas_.Define(proc_, r.domain, r.text);
    }
  });
  for (const auto& cr : creates) {
    uint32_t name = 0;
    if (cr.first == 0 || !tables_.LookupString(proc_, cr.second, &name)) continue;
    tables_.NameDomainIfUnnamed(proc_, cr.first, name);
  }
}

// The walk of Step and StepRanges: the next record of the current chunk; an event (dated)
// goes to on_event(record), whose result is returned (true: it gave a row), a definition to
// the tables.
template <class OnEvent>
bool Decoder::DecodeRecord(OnEvent on_event) {
  const uint8_t* p = nullptr;
  uint64_t len = 0;
  if (cursor_.NextRecord(&p, &len) != SegmentCursor::kRecord) return false;
  stats_.records++;
  Record r = ParseRecord(p, cursor_.clock());
  if (IsEventKind(r.kind)) {
    if (!r.ts_known) {  // a compact event after damage, before the next full one: undated
      cursor_.LoseEvent();
      return false;
    }
    stats_.events++;
    return on_event(r);
  }
  ApplyDefinition(r);
  return false;
}

bool Decoder::Step(NvtxrRow* row) {
  return DecodeRecord([this, row](const Record& r) { return MatchEvent(r, row); });
}

bool Decoder::MatchEvent(const Record& r, NvtxrRow* row) {
  const ChunkRef& chunk = cursor_.chunk();
  int64_t tid = chunk.tid;
  uint64_t stack = (chunk.thread_key << 16) | r.domain;
  if (r.kind == kRangePop) return matcher_.Pop(proc_, stack, r.ts, tid, row);
  if (r.kind == kRangeEnd) return matcher_.End(proc_, r.range_id, r.ts, tid, row);

  NvtxrRow b;
  b.start_ns = r.ts;
  b.end_ns = r.ts;
  b.pid = cursor_.info().pid;
  b.tid = tid;
  b.end_tid = tid;
  b.range_id = r.range_id;
  b.domain = tables_.Domain(proc_, r.domain);
  b.category = r.category;
  b.color = r.color;
  b.depth = 0;
  b.flags = 0;
  if (r.flags & kFlagColor) b.flags |= kNvtxrHasColor;
  if (r.flags & kFlagCategory) b.flags |= kNvtxrHasCategory;
  if (r.flags & kFlagRegisteredMessage) b.flags |= kNvtxrRegistered;
  bool unknown = false;
  b.message = EventMessage(r, &unknown);
  if (unknown) b.flags |= kNvtxrUnknownString;
  b.payload_type = r.payload_type;
  b.payload = EventPayload(r);
  switch (r.kind) {
    case kMark:
      b.kind = kNvtxrMark;
      *row = b;
      return true;
    case kRangePush:
      b.kind = kNvtxrPushPop;
      matcher_.Push(proc_, stack, b);
      return false;
    default:  // kRangeStart
      b.kind = kNvtxrStartEnd;
      return matcher_.Start(proc_, b, row);
  }
}

uint32_t Decoder::EventMessage(const Record& r, bool* unknown) {
  uint32_t message = 0;
  if (!tables_.LookupString(proc_, r.msg, &message)) {
    *unknown = true;
    stats_.unknown_strings++;
    return 0;
  }
  return message;
}

uint64_t Decoder::EventPayload(const Record& r) {
  if (r.payload_type != kPayloadExt) return r.payload;
  return tables_.Intern(schemas_.ToJson(proc_, r.domain, r.block, r.payload));  // (a string of the tables)
}

std::vector<Decoder::OpenPush>& Decoder::FindPushStack(uint64_t stack) {
  size_t k = static_cast<size_t>(proc_);
  if (push_stacks_.size() <= k) push_stacks_.resize(k + 1);
  last_stack_ = &push_stacks_[k][stack];  // (an unordered_map's elements stay where they are)
  last_stack_proc_ = proc_;
  last_stack_key_ = stack;
  return *last_stack_;
}

// (always inlined into DecodeRecord: a call per event, the record passed through memory,
// cost analyze's decoding 4-6 %)
__attribute__((always_inline)) inline bool Decoder::RangeEvent(const Record& r, RangeColumns* out) {
  if (r.kind != kRangePush && r.kind != kRangePop) {  // marks, start/end: as Step
    NvtxrRow row;
    if (!MatchEvent(r, &row)) return false;
    out->AddRows(&row, 1);
    return true;
  }
  const ChunkRef& chunk = cursor_.chunk();
  std::vector<OpenPush>& s = PushStack((chunk.thread_key << 16) | r.domain);
  if (r.kind == kRangePop) {
    if (s.empty()) {
      stats_.unmatched_pops++;
      return false;
    }
    const OpenPush& o = s.back();
    out->AddPushPop(o.start, r.ts, o.pid, o.tid, o.message, o.domain);
    s.pop_back();
    return true;
  }
  bool unknown = false;
  OpenPush o{r.ts, cursor_.info().pid, chunk.tid, EventMessage(r, &unknown), tables_.Domain(proc_, r.domain)};
  if (r.payload_type == kPayloadExt) EventPayload(r);  // (the same strings in the tables as Next's)
  s.push_back(o);
  return false;
}

bool Decoder::StepRanges(RangeColumns* out) {
  return DecodeRecord([this, out](const Record& r) { return RangeEvent(r, out); });
}

int64_t Decoder::NextRanges(RangeColumns* out, int64_t capacity) {
  return Drain(
      capacity, [this, out](int64_t) { return StepRanges(out); },
      [out](int64_t, const NvtxrRow* rows, int64_t n) { out->AddRows(rows, n); });
}

void Decoder::ApplyDefinition(const Record& r) {
  uint32_t name = 0;
  switch (r.kind) {
    case kDomainCreate: {
      bool named = tables_.LookupString(proc_, r.msg, &name);
      tables_.CreateDomain(proc_, r.domain, named, name, static_cast<uint64_t>(r.ts));
      break;
    }
    case kCategoryName:
      if (tables_.LookupString(proc_, r.msg, &name)) {
        tables_.NameCategory(tables_.Domain(proc_, r.domain), r.category, name);
      }
      break;
    case kThreadName:
      if (tables_.LookupString(proc_, r.msg, &name)) {
        tables_.NameThread(cursor_.info().pid, r.tid, name, (r.flags & kFlagThreadNameOverride) != 0);
      }
      break;
    default:  // kStringDef, kPayloadSchema: collected by CollectDefinitions; kDomainDestroy: nothing to do
      break;
  }
}

void Decoder::Finish() {
  CloseSegment();
  pending_.clear();
  pending_pos_ = 0;
  matcher_.TakeOpen(&pending_);
  for (auto& stacks : push_stacks_) {  // (NextRanges' push/pop ranges left open)
    for (auto& kv : stacks) {
      int32_t depth = 0;
      for (const OpenPush& o : kv.second) {
        NvtxrRow r{};
        r.start_ns = o.start;
        r.end_ns = -1;
        r.pid = o.pid;
        r.tid = r.end_tid = o.tid;
        r.message = o.message;
        r.domain = o.domain;
        r.depth = depth++;
        r.kind = kNvtxrPushPop;
        r.flags = kNvtxrUnclosed;
        pending_.push_back(r);
      }
    }
  }
  push_stacks_.clear();
  last_stack_ = nullptr;
  std::sort(pending_.begin(), pending_.end(),
            [](const NvtxrRow& a, const NvtxrRow& b) { return a.start_ns < b.start_ns; });
  stats_.unclosed += pending_.size();
  stats_.rows += pending_.size();
  phase_ = kFlush;
}

// The loop of Next and NextRanges: up to `capacity` rows, step(n) decoding the next record
// (true: it gave row n), then after Finish flush(n, rows, count) handing out the ranges left open.
template <class StepFn, class FlushFn>
int64_t Decoder::Drain(int64_t capacity, StepFn step, FlushFn flush) {
  int64_t n = 0;
  while (n < capacity) {
    if (phase_ == kRecords) {
      if (!cursor_.in_chunk() && !cursor_.NextChunk()) {
        phase_ = kDone;
        break;
      }
      if (step(n)) {
        stats_.rows++;
        ++n;
      }
    } else if (phase_ == kFlush) {
      if (pending_pos_ >= pending_.size()) {
        pending_.clear();
        pending_.shrink_to_fit();
        pending_pos_ = 0;
        phase_ = kIdle;
        break;
      }
      size_t take = std::min<size_t>(pending_.size() - pending_pos_, static_cast<size_t>(capacity - n));
      flush(n, &pending_[pending_pos_], static_cast<int64_t>(take));
      pending_pos_ += take;
      n += static_cast<int64_t>(take);
    } else {
      break;
    }
  }
  return n;
}

int64_t Decoder::Next(NvtxrRow* rows, int64_t capacity) {
  return Drain(
      capacity, [this, rows](int64_t n) { return Step(&rows[n]); },
      [rows](int64_t n, const NvtxrRow* from, int64_t count) { memcpy(&rows[n], from, count * sizeof(NvtxrRow)); });
}

}  // namespace nvtx_reader
