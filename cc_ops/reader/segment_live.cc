// SegmentCursor's live reads (watch's: segment_cursor.h, OpenLive and Resume): a raw segment
// read again while it is written, each read taking each thread's chunk up where the last one
// stopped, at the clock it had there.
#include <algorithm>

#include "reader/segment_cursor.h"

namespace nvtx_reader {

using namespace nvtx_record;

int SegmentCursor::OpenLive(const char* path, std::string* error) {
  const uint64_t damage = stats_.damaged_chunks + stats_.truncated_segments;
  int rc = Open(path, /*packed=*/false, 0, error);
  if (rc != 0) return rc;
  live_ = true;
  live_failed_ = stats_.damaged_chunks + stats_.truncated_segments != damage;
  slots_.assign(info_.chunk_count, LiveSlot());
  for (const ChunkRef& c : order_) {
    slots_[c.slot].seen = true;
    slots_[c.slot].ref = c;
    live_failed_ = live_failed_ || c.bad_seal;
  }
  TakeCaps();
  return 0;
}

int SegmentCursor::Resume(std::string* error) {
  if (!live_ || live_failed_ || fd_.get() < 0) return -1;
  SegmentHeaderRead read;
  if (RereadHeader(&read, error) != 0) {
    live_failed_ = true;
    return -1;
  }
  const SegmentHeader& h = read.header;
  if (h.pid != header_.pid || h.start_ns != header_.start_ns || h.chunk_size != header_.chunk_size ||
      h.header_size != header_.header_size || h.process_start_ns != header_.process_start_ns ||
      h.dropped_events < header_.dropped_events) {
    live_failed_ = true;  // (another segment in its place)
    *error = "the segment changed";
    return -1;
  }
  stats_.dropped_events += h.dropped_events - header_.dropped_events;
  header_ = h;
  const uint64_t size = read.file_size, hsize = h.header_size, csize = h.chunk_size;
  const uint64_t count = (size - hsize + csize - 1) / csize;
  info_.chunk_count = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
  if (count > slots_.size()) slots_.resize(count);
  std::vector<ChunkRef> file_order;
  for (uint64_t k = 0; k < count; ++k) {
    LiveSlot& s = slots_[k];
    if (s.done) continue;
    ChunkRef ref;
    int found = ReadChunkRef(k, std::min<uint64_t>(csize, size - (hsize + k * csize)), &ref);
    if (found == 0) continue;  // (not published yet)
    if (found < 0 || ref.bad_seal ||
        (s.seen && (ref.thread_index != s.ref.thread_index || ref.seq != s.ref.seq || ref.tid != s.ref.tid))) {
      live_failed_ = true;
      *error = "a chunk is damaged or changed";
      return -1;
    }
    ref.from = s.pos;
    ref.clock = s.clock;
    s.seen = true;
    s.ref = ref;
    file_order.push_back(ref);
  }
  Order(file_order, /*count_gaps=*/false);
  TakeCaps();
  if (live_failed_) *error = "damage in what was written since";
  return live_failed_ ? -1 : 0;
}

void SegmentCursor::TakeCaps() {
  for (ChunkRef& c : order_) {
    chunk_ = &c;
    end_ = RecordsEnd(c, ReadChunk(c));
    uint64_t pos = c.from;
    while (pos + 8 <= end_) {
      const uint8_t* r = data_ + pos;
      const uint64_t len = Load64(r) == 0 ? 0 : RecordLength(r, end_ - pos);
      if (len == 0) {
        // a zero word: the end of data, or a record being written (read by the next read);
        // a record that cannot be one: damage (the segment is read whole)
        if (Load64(r) != 0) live_failed_ = true;
        break;
      }
      pos += len;
    }
    c.cap = pos;
  }
  chunk_ = nullptr;
  end_ = 0;
}

void SegmentCursor::KeepPlace() {
  if (!live_ || chunk_ == nullptr || chunk_->slot >= slots_.size()) return;
  LiveSlot& s = slots_[chunk_->slot];
  s.pos = pos_;
  s.clock = clock_;
  s.done = chunk_->sealed_end && pos_ + 8 > chunk_->sealed_end;
}

}  // namespace nvtx_reader
