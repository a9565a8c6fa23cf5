#include "reader/segment_cursor.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>

namespace nvtx_reader {

using namespace nvtx_record;

namespace {

constexpr uint32_t kMaxChunkSize = 1u << 30;
constexpr uint32_t kMaxHeaderSize = 1u << 20;

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void FileDescriptor::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// The checks of a segment's header (the raw segment is `size` bytes; read(dst, n, off) reads
// it as pread does): as ReadSegmentHeader.
template <class Read>
int ParseHeader(Read read, uint64_t size, bool lenient, SegmentHeaderRead* out, const char* path, std::string* error) {
  out->file_size = size;
  // The fields every writer wrote; lenient: up to start_ns.
  const uint64_t needed = lenient ? offsetof(SegmentHeader, start_realtime_ns) : kHeaderV1End;
  if (size < needed) {
    *error = std::string("segment header truncated: ") + path;
    return -2;
  }
  SegmentHeader& h = out->header;
  int64_t got = read(&h, std::min<uint64_t>(size, sizeof(h)), 0);
  if (got < static_cast<int64_t>(needed)) {
    int e = errno;
    memset(&h, 0, sizeof(h));
    *error = std::string("cannot read ") + path + ": " + (got < 0 ? strerror(e) : "short read");
    return -1;
  }
  const char* problem = nullptr;
  if (memcmp(h.magic, kSegmentMagic, sizeof(h.magic)) != 0)
    problem = "bad segment magic";
  else if (lenient)
    problem = nullptr;
  else if (h.version < kOldestFormatVersion || h.version > kFormatVersion)
    problem = "unsupported format version";
  else if (h.header_size < kHeaderV1End || h.header_size > kMaxHeaderSize || h.header_size % 8 != 0)
    problem = "bad header size";
  else if (h.chunk_size < 4096 || h.chunk_size > kMaxChunkSize || h.chunk_size % 8 != 0)
    problem = "bad chunk size";
  else if (size < h.header_size)
    problem = "segment header truncated";
  if (problem) {
    *error = std::string(problem) + ": " + path;
    return -2;
  }
  if (h.header_size < sizeof(SegmentHeader)) {
    // An older writer's header: what follows cmdline is not part of it.
    memset(reinterpret_cast<char*>(&h) + kHeaderV1End, 0, sizeof(SegmentHeader) - kHeaderV1End);
  }
  return 0;
}

}  // namespace

int ReadSegmentHeader(const char* path, bool lenient, FileDescriptor* fd, SegmentHeaderRead* out, std::string* error) {
  memset(out, 0, sizeof(*out));
  *fd = FileDescriptor(::open(path, O_RDONLY | O_CLOEXEC));
  if (fd->get() < 0) {
    *error = std::string("cannot open ") + path + ": " + strerror(errno);
    return -1;
  }
  struct stat st;
  if (fstat(fd->get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    fd->Reset();
    *error = std::string("not a regular file: ") + path;
    return -1;
  }
  const int file = fd->get();
  int rc = ParseHeader([file](void* dst, uint64_t n, uint64_t off) { return ReadFully(file, dst, n, off); },
                       static_cast<uint64_t>(st.st_size), lenient, out, path, error);
  if (rc != 0) fd->Reset();
  return rc;
}

void FillSegmentInfo(const SegmentHeader& h, NvtxrSegmentInfo* info) {
  memset(info, 0, sizeof(*info));
  info->pid = h.pid;
  info->ppid = h.ppid;
  info->start_ns = h.start_ns;
  info->start_realtime_ns = h.start_realtime_ns;
  info->chunk_size = h.chunk_size;
  static_assert(sizeof(info->process_name) == sizeof(h.process_name), "process_name");
  static_assert(sizeof(info->cmdline) == sizeof(h.cmdline), "cmdline");
  memcpy(info->process_name, h.process_name, sizeof(info->process_name) - 1);
  memcpy(info->cmdline, h.cmdline, sizeof(info->cmdline) - 1);
  static_assert(sizeof(info->host_name) == sizeof(h.host_name), "host_name");
  memcpy(info->host_name, h.host_name, sizeof(info->host_name) - 1);
  info->header_size = h.header_size;
  info->process_start_ns = h.process_start_ns;
  info->parent_pid = h.parent_pid;
  info->parent_process_start_ns = h.parent_process_start_ns;
}

int SegmentCursor::Open(const char* path, bool packed, uint64_t cache_bytes, std::string* error) {
  Close();
  packed_.ClearDamage();
  SegmentHeaderRead read;
  int rc;
  if (packed) {
    if (!packed_.Open(path, cache_bytes)) return -3;  // (nothing counted: Python words the damage)
    memset(&read, 0, sizeof(read));
    rc = ParseHeader([this](void* dst, uint64_t n, uint64_t off) { return ReadAt(dst, n, off); }, packed_.size(),
                     /*lenient=*/false, &read, path, error);
    if (rc != 0) packed_.Close();
  } else {
    rc = ReadSegmentHeader(path, /*lenient=*/false, &fd_, &read, error);
  }
  if (rc != 0) {
    if (rc == -1)
      stats_.unreadable_segments++;
    else
      stats_.damaged_segments++;
    return rc;
  }
  header_ = read.header;
  FillSegmentInfo(header_, &info_);
  segment_no_++;
  const uint64_t size = read.file_size;
  const uint32_t hsize = header_.header_size, csize = header_.chunk_size;
  stats_.dropped_events += header_.dropped_events;
  uint64_t body = size - hsize;
  if (header_.chunk_count > body / csize) {  // (chunk_count * csize may not fit in 64 bits)
    stats_.truncated_segments++;
    stats_.missing_chunks += header_.chunk_count - body / csize;
  }
  try {
    file_size_ = size;
    Scan(size, hsize, csize);
  } catch (...) {
    Close();
    stats_.unreadable_segments++;
    *error = std::string("out of memory reading ") + path;
    return -1;
  }
  return 0;
}

void SegmentCursor::Close() {
  fd_.Reset();
  packed_.Close();
  order_.clear();
  order_.shrink_to_fit();
  next_chunk_ = 0;
  in_chunk_ = false;
  chunk_ = nullptr;
  data_ = nullptr;
  live_ = live_failed_ = false;
  slots_.clear();
  if (buf_.size() > (1u << 20)) {
    buf_.clear();
    buf_.shrink_to_fit();
  }
}

void SegmentCursor::Scan(uint64_t size, uint32_t hsize, uint32_t csize) {
  uint64_t body = size - hsize;
  uint64_t count = (body + csize - 1) / csize;
  info_.chunk_count = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
  std::vector<ChunkRef> file_order;
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t off = hsize + k * csize;
    if (packed_.is_open() && off >= packed_.data_end()) {
      // Past a packed segment's last frame its raw bytes are zeros: unpublished chunks (a raw
      // size past the frames, however large, costs no time).
      stats_.unpublished_chunks += count - k;
      break;
    }
    ChunkRef ref;
    int found = ReadChunkRef(k, std::min<uint64_t>(csize, size - off), &ref);
    if (found < 0) {
      stats_.damaged_chunks++;
      continue;
    }
    if (found == 0) {
      stats_.unpublished_chunks++;
      if (!packed_.is_open()) k = SkipHole(k, count, hsize, csize);
      continue;
    }
    file_order.push_back(ref);
  }
  Order(file_order, /*count_gaps=*/true);
}

int SegmentCursor::ReadChunkRef(uint64_t k, uint64_t avail, ChunkRef* ref) {
  const uint64_t off = header_.header_size + k * header_.chunk_size;
  ChunkHeader ch{};
  int64_t got = ReadAt(&ch, std::min<uint64_t>(avail, sizeof(ch)), off);
  if (got < 0) return -1;
  if (static_cast<uint64_t>(got) < sizeof(ch)) {
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&ch);
    return std::all_of(bytes, bytes + got, [](uint8_t b) { return b == 0; }) ? 0 : -1;
  }
  if (ch.magic == 0) return 0;
  if (ch.magic != kChunkMagic) return -1;
  ref->offset = off;
  ref->available = avail;
  ref->thread_index = ch.thread_index;
  ref->tid = ch.tid;
  ref->seq = ch.seq;
  // Older writers: the thread index, valid within this segment only.
  ref->thread_key =
      ch.thread_serial ? ch.thread_serial : ((uint64_t(1) << 47) | (segment_no_ << 24) | ref->thread_index);
  ref->sealed_end = ch.sealed_end;
  ref->sum1 = ch.sum1;
  ref->sum2 = ch.sum2;
  // A seal no writer writes: the header's bytes changed. The records are read unchecked.
  ref->bad_seal = ch.sealed_end &&
                  (ch.sealed_end < kChunkHeaderSize || ch.sealed_end > header_.chunk_size || ch.sealed_end % 8 != 0);
  if (ref->bad_seal) ref->sealed_end = 0;
  ref->slot = k;
  return 1;
}

void SegmentCursor::Order(const std::vector<ChunkRef>& file_order, bool count_gaps) {
  // Each thread's chunks in seq order, interleaved with the other threads in file order.
  std::unordered_map<uint32_t, std::vector<ChunkRef>> by_thread;
  for (const ChunkRef& c : file_order) by_thread[c.thread_index].push_back(c);
  for (auto& kv : by_thread) {
    auto& v = kv.second;
    std::stable_sort(v.begin(), v.end(), [](const ChunkRef& a, const ChunkRef& b) { return a.seq < b.seq; });
    for (size_t i = 0; count_gaps && i < v.size(); ++i) {
      uint64_t expected = i == 0 ? 0 : v[i - 1].seq + 1;
      if (v[i].seq != expected) stats_.seq_gaps++;
    }
  }
  std::unordered_map<uint32_t, size_t> taken;
  order_.clear();
  order_.reserve(file_order.size());
  for (const ChunkRef& c : file_order) order_.push_back(by_thread[c.thread_index][taken[c.thread_index]++]);
  next_chunk_ = 0;
}

int SegmentCursor::RereadHeader(SegmentHeaderRead* out, std::string* error) {
  struct stat st;
  const int file = fd_.get();
  if (file < 0 || fstat(file, &st) != 0) {
    *error = "the segment cannot be read";
    return -1;
  }
  return ParseHeader([file](void* dst, uint64_t n, uint64_t off) { return ReadFully(file, dst, n, off); },
                     static_cast<uint64_t>(st.st_size), /*lenient=*/false, out, "the segment", error);
}

uint64_t SegmentCursor::SkipHole(uint64_t k, uint64_t count, uint32_t hsize, uint32_t csize) {
  // Chunks wholly in a hole of a sparse file read as zeros: unpublished, counted without
  // reading them (a file's size, however large, costs no time: a copy of a packed segment
  // whose raw size is the most 64 bits say, a file extended by truncate).
  const uint64_t after = hsize + (k + 1) * csize;
  if (after >= file_size_) return k;
  off_t data = lseek(fd_.get(), static_cast<off_t>(after), SEEK_DATA);
  uint64_t next;
  if (data < 0) {
    if (errno != ENXIO) return k;  // (no SEEK_DATA here: chunk by chunk)
    next = count;                  // no data after this chunk
  } else {
    next = (static_cast<uint64_t>(data) - hsize) / csize;  // the chunk the data is in
  }
  if (next <= k + 1) return k;
  stats_.unpublished_chunks += std::min(next, count) - (k + 1);
  return std::min(next, count) - 1;
}

int64_t SegmentCursor::ReadAt(void* dst, uint64_t n, uint64_t off) {
  if (packed_.is_open()) return static_cast<int64_t>(packed_.Read(dst, n, off));
  return ReadFully(fd_.get(), dst, n, off);
}

uint64_t SegmentCursor::ReadChunk(const ChunkRef& c) {
  if (packed_.is_open()) {
    uint64_t got = 0;
    const uint8_t* p = packed_.Bytes(c.offset, c.available, &got);
    if (p) {  // (in place: one frame holds the chunk, as packed.py packs them)
      data_ = p;
      return got;
    }
  }
  if (buf_.size() < c.available) buf_.resize(c.available);
  data_ = buf_.data();
  // (a live read takes the chunk up where the last one stopped: the bytes before are not read)
  const uint64_t lo = c.from > kChunkHeaderSize ? std::min(c.from, c.available) : 0;
  int64_t got = ReadAt(buf_.data() + lo, c.available - lo, c.offset + lo);
  return got < 0 ? lo : lo + static_cast<uint64_t>(got);
}

bool SegmentCursor::AllZero(uint64_t from, uint64_t to) const {
  return std::all_of(data_ + from, data_ + to, [](uint8_t b) { return b == 0; });
}

uint64_t SegmentCursor::LastNonZeroEnd(uint64_t from, uint64_t to) const {
  while (to > from && data_[to - 1] == 0) --to;
  return to;
}

namespace {

// Whether [p, p + n) is a payload block as the writer builds one (record_format.h): entries of
// a PayloadEntryHeader (kind data or string, index below kMaxPayloadsPerEvent) and its stored
// bytes padded to 8, ending exactly at n.
bool IsPayloadBlock(const uint8_t* p, uint64_t n) {
  uint64_t at = 0;
  while (at < n) {
    if (n - at < sizeof(PayloadEntryHeader)) return false;
    PayloadEntryHeader h;
    memcpy(&h, p + at, sizeof(h));
    if ((h.kind != kPayloadEntryData && h.kind != kPayloadEntryString) || h.index >= kMaxPayloadsPerEvent) return false;
    at += sizeof(h);
    if (h.stored > n - at) return false;
    at += (uint64_t(h.stored) + 7) & ~uint64_t(7);
  }
  return at == n;
}

// Whether [p, p + n) is a PayloadSchemaDef and its entries, each with its name padded to 8,
// ending exactly at n.
bool IsSchemaBody(const uint8_t* p, uint64_t n) {
  if (n < sizeof(PayloadSchemaDef)) return false;
  PayloadSchemaDef d;
  memcpy(&d, p, sizeof(d));
  uint64_t at = sizeof(d) + ((uint64_t(d.name_len) + 7) & ~uint64_t(7));
  for (uint32_t i = 0; i < d.num_entries; ++i) {
    if (at > n || n - at < sizeof(PayloadSchemaEntryDef)) return false;
    PayloadSchemaEntryDef e;
    memcpy(&e, p + at, sizeof(e));
    at += sizeof(e) + ((uint64_t(e.name_len) + 7) & ~uint64_t(7));
  }
  return at == n;
}

}  // namespace

uint64_t SegmentCursor::TornRecordEnd(uint64_t at) const {
  // The record the writer was writing at `at` (its first word not yet stored) is one of the
  // record kinds, at its real size (record_format.h; the writer stores the rest first):
  // an event without a payload block, a domain, category or thread-name record (at most
  // kLostEventBytes); a kStringDef (u32 length, u32 0, then a text of that many bytes, no
  // NUL in it, at most a chunk's room); a kPayloadSchema (the same, then a PayloadSchemaDef
  // whose entries end at that length); an event with an extended payload (the block's
  // length in its last fixed word, then a block of entries ending there). Whatever the
  // words after a zero word are, they are read as one of these only when their bytes are
  // what the writer writes there; else the furthest a torn record ends is kLostEventBytes.
  // (A thread-name record's tid in the second word is no string's length: its text would be
  // the records after it, which hold NUL bytes.)
  const uint64_t last = LastNonZeroEnd(at, end_);
  auto word = [&](uint64_t off) { return at + off + 8 <= end_ ? Load64(data_ + at + off) : 0; };
  auto pad8 = [](uint64_t v) { return (v + 7) & ~uint64_t(7); };
  uint64_t longest = kLostEventBytes;
  const uint64_t w1 = word(8);
  const uint64_t room = info_.chunk_size > kChunkHeaderSize + 16 ? info_.chunk_size - kChunkHeaderSize - 16 : 0;
  if (w1 >> 32 == 0 && w1 != 0 && w1 <= room && at + 16 + pad8(w1) <= end_) {
    const uint8_t* body = data_ + at + 16;
    // (a text's bytes stored so far: no NUL among them up to the chunk's last non-zero byte)
    const uint64_t written = last > at + 16 ? std::min<uint64_t>(last - at - 16, w1) : 0;
    const bool text = std::find(body, body + written, uint8_t(0)) == body + written;
    if (text || IsSchemaBody(body, w1)) longest = std::max(longest, 16 + pad8(w1));
  }
  for (uint64_t off = 16; off <= 32; off += 8) {
    const uint64_t block = word(off);
    if (block == 0 || block > kMaxExtPayloadBytes || block % 8 != 0 || at + off + 8 + block > end_) continue;
    if (IsPayloadBlock(data_ + at + off + 8, block)) longest = std::max(longest, off + 8 + block);
  }
  return at + longest;
}

bool SegmentCursor::IsEndOfData(uint64_t at) const { return LastNonZeroEnd(at, end_) <= TornRecordEnd(at); }

void SegmentCursor::Reread(uint64_t from) {
  if (packed_.is_open()) return;  // (a packed segment's bytes do not change)
  int64_t got = ReadFully(fd_.get(), buf_.data() + from, end_ - from, chunk_->offset + from);
  const uint64_t n = got < 0 ? 0 : static_cast<uint64_t>(got);
  if (from + n < end_) {  // (cut meanwhile: what was read is what there is)
    end_ = from + n;
    whole_ = false;
  }
}

uint64_t SegmentCursor::ResyncFrom(uint64_t from) const {
  for (uint64_t q = from; q + 8 <= end_; q += 8) {
    const uint8_t* r = data_ + q;
    // Only a full-form record: a compact event there could not be dated (the clock is lost
    // with the damage), and its one word is easily mimicked by the bytes of a damaged record
    // (a small timestamp, a range id).
    if (Load64(r) != 0 && !IsCompactEventKind(r[0]) && RecordLength(r, end_ - q) != 0) return q;
  }
  return end_;
}

bool SegmentCursor::NextChunk() {
  if (next_chunk_ >= order_.size()) return false;
  chunk_ = &order_[next_chunk_++];
  const uint64_t got = ReadChunk(*chunk_);
  const uint64_t sealed = chunk_->sealed_end;
  end_ = std::min(RecordsEnd(*chunk_, got), chunk_->cap);
  whole_ = sealed ? got >= sealed : got >= info_.chunk_size;
  damaged_ = false;
  rereads_ = 0;
  bool mismatch = chunk_->bad_seal;
  if (sealed && whole_ && !live_) {  // (a live read reads a chunk in parts: the read after the writer ends checks it)
    uint64_t sum1, sum2;
    ChunkSums(data_, sealed, &sum1, &sum2);
    mismatch = sum1 != chunk_->sum1 || sum2 != chunk_->sum2;
  }
  if (mismatch) {
    // Bits changed after the writer sealed the chunk: its records are still read (the
    // best there is), but at least one of them is not what was recorded.
    damaged_ = true;
    stats_.damaged_chunks++;
    stats_.checksum_mismatches++;
  }
  pos_ = chunk_->from;
  clock_ = chunk_->clock;  // (Reset, unless a live read takes the chunk up)
  in_chunk_ = true;
  stats_.chunks++;
  return true;
}

void SegmentCursor::LoseEvent() {
  live_failed_ = live_failed_ || live_;
  if (!damaged_) {
    damaged_ = true;
    stats_.damaged_chunks++;
  }
  stats_.lost_events_min++;
}

SegmentCursor::Step SegmentCursor::NextRecord(const uint8_t** p, uint64_t* len) {
  const Step step = WalkRecord(p, len);
  if (live_ && step != kRecord) KeepPlace();  // (where the next live read takes the chunk up)
  return step;
}

SegmentCursor::Step SegmentCursor::WalkRecord(const uint8_t** p, uint64_t* len) {
  if (pos_ + 8 > end_) {
    // Chunk exhausted without a zero word: fine when the chunk is complete, damage when
    // the file was cut inside it (or could not be read). A live read ends at its cap.
    in_chunk_ = false;
    if (live_) return kChunkEnd;
    if (!whole_) {
      if (!damaged_) stats_.damaged_chunks++;
      return kDamage;
    }
    return kChunkEnd;
  }
  const uint8_t* r = data_ + pos_;
  uint64_t n = Load64(r) == 0 ? 0 : RecordLength(r, end_ - pos_);
  if (n == 0 && Load64(r) == 0 && !chunk_->sealed_end) {
    // The end of an unsealed chunk's data (record_format.h, "End of data"): zeros, or the
    // body of the one record the writer was writing (stored before its first word) and
    // then zeros: a writer killed there, or one still writing when it was read.
    if (IsEndOfData(pos_)) {
      in_chunk_ = false;
      return kChunkEnd;
    }
    // More than that after the zero word: a live writer may have written on while the
    // chunk was read (its first word read before it was stored, the records after it
    // read after). The rest is read again; records once published never change.
    while (rereads_ < kMaxRereads && Load64(r) == 0) {
      rereads_++;
      Reread(pos_);
      if (IsEndOfData(pos_)) {
        in_chunk_ = false;
        return kChunkEnd;
      }
    }
    n = Load64(r) == 0 ? 0 : RecordLength(r, end_ - pos_);
  }
  if (n == 0) {
    // A zero word ends the chunk's records when only zeros follow (the writer had not got
    // there, or was killed; in an unsealed chunk, see above). Anything else is damage:
    // bytes zeroed among the records, or a record that cannot be one. The walk resumes at
    // the next word that starts a valid record, so what follows the damage is still read;
    // the bytes skipped count as lost events (a lower bound: each skipped event held at
    // most kMaxEventRecordBytes).
    uint64_t next = ResyncFrom(pos_ + 8);
    // (in a sealed chunk a zero word before the seal is damage: the writer seals at the end
    // of the records it published, every first word stored)
    if (Load64(r) == 0 && next >= end_ && AllZero(pos_, end_) && !chunk_->sealed_end) {
      in_chunk_ = false;
      return kChunkEnd;
    }
    if (!damaged_) {
      damaged_ = true;
      stats_.damaged_chunks++;
    }
    live_failed_ = live_failed_ || live_;
    // (what held records: up to the resumed record, or to the chunk's last non-zero byte)
    const uint64_t lost_to = next < end_ ? next : LastNonZeroEnd(pos_, end_);
    stats_.lost_events_min += (lost_to - pos_ + kLostEventBytes - 1) / kLostEventBytes;
    if (next >= end_) {
      in_chunk_ = false;
      return kDamage;
    }
    pos_ = next;
    clock_.Reset();  // the skipped bytes may have held events the clock counts from
    r = data_ + pos_;
    n = RecordLength(r, end_ - pos_);
  }
  pos_ += n;
  *p = r;
  *len = n;
  return kRecord;
}

}  // namespace nvtx_reader
