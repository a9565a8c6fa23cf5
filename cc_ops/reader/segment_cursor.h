// The segment being read: its file (read with pread, never mapped: a hole of a sparse
// file on a full file system, a file truncated while being read or an I/O error cannot
// raise SIGBUS), the checks of its header, the order of its chunks (each thread's chunks
// in seq order) and the walk through the records of one chunk at a time.
#ifndef NVTX_PLUGINS_TF_READER_SEGMENT_CURSOR_H_
#define NVTX_PLUGINS_TF_READER_SEGMENT_CURSOR_H_

#include <stdint.h>

#include <string>
#include <vector>

#include "format/record_format.h"
#include "reader/decode.h"
#include "reader/packed_segment.h"
#include "reader/record_parse.h"

namespace nvtx_reader {

// An open file descriptor, closed with its owner.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { Reset(); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  int get() const { return fd_; }
  void Reset();

 private:
  int fd_ = -1;
};

// The header fields of a segment, read straight into the format's struct; the fields
// past kHeaderV1End are zero for headers of older writers.
struct SegmentHeaderRead {
  nvtx_record::SegmentHeader header;
  uint64_t file_size;
};

// Opens `path` and reads its header. 0 when it is a segment; -1 when the file cannot be
// read (*error says why), -2 when the header is damaged. With `lenient`, only the magic
// and the fields up to start_ns are required (enough to place the segment in time).
int ReadSegmentHeader(const char* path, bool lenient, FileDescriptor* fd, SegmentHeaderRead* out, std::string* error);

// Copies the identity fields of a header into the C API's struct.
void FillSegmentInfo(const nvtx_record::SegmentHeader& h, NvtxrSegmentInfo* info);

struct ChunkRef {
  uint64_t offset;     // file offset of the chunk
  uint64_t available;  // bytes of the chunk present in the file (<= chunk_size)
  uint32_t thread_index;
  int64_t tid;
  uint64_t seq;
  uint64_t thread_key;  // identity of the thread across the segments of its process
  uint64_t sealed_end;  // ChunkHeader::sealed_end (0: not sealed, or a bad seal)
  uint64_t sum1, sum2;  // the seal's sums
  bool bad_seal;        // a sealed_end no writer writes (damage)
  // Where this read takes up the chunk's records, with the clock there (a live read: where
  // the last read of the chunk stopped), and where they end for this read (a live read: the
  // end of data seen before the definitions were read, see SegmentCursor::OpenLive).
  uint64_t from = nvtx_record::kChunkHeaderSize;
  uint64_t cap = UINT64_MAX;
  ChunkClock clock;
  uint64_t slot = 0;  // the chunk's index in the file
};

class SegmentCursor {
 public:
  explicit SegmentCursor(NvtxrStats& stats) : stats_(stats) {}

  // A live read (watch's): the segment read again while it is written, each read taking up
  // each thread's chunk where the last one stopped, so that a read costs what was written
  // since. OpenLive opens it as Open does (a raw segment), Resume reads the header and the
  // headers of the chunks not read to their seal again and orders those with records past
  // where the last read stopped. Before the definitions are read, each chunk's end of data is
  // taken (its `cap`): every event read then was written before, and so was the definition
  // that names it, written before the event (in any thread's chunk), so the definitions read
  // after name every event read (a whole read reads the events after the definitions: a
  // record written between the two may be named unknown, until the next read). Any damage,
  // a seal that does not check, a chunk whose header changed: failed() is set, and the
  // segment is to be read whole. Returns as Open (Resume: -1 when not live or failed).
  int OpenLive(const char* path, std::string* error);
  int Resume(std::string* error);
  bool live() const { return live_; }
  bool failed() const { return live_failed_; }

  // Opens a segment: checks its header, counts its truncation and its dropped events,
  // finds and orders its chunks. Return codes as nvtxr_open_segment (0, -1, -2); counts
  // unreadable and damaged segments itself. `packed`: a packed segment (packed_segment.h),
  // -3 when it cannot be read as one (nothing counted; unpack_damage() says why). May
  // throw std::bad_alloc. `cache_bytes`: see PackedSegment::Open.
  int Open(const char* path, bool packed, uint64_t cache_bytes, std::string* error);
  void Close();
  bool is_open() const { return fd_.get() >= 0 || packed_.is_open(); }
  // What of the packed segment opened last did not unpack (its frames read as zeros).
  const std::vector<NvtxrUnpackDamage>& unpack_damage() const { return packed_.damage(); }

  const NvtxrSegmentInfo& info() const { return info_; }
  const nvtx_record::SegmentHeader& header() const { return header_; }
  // 1, 2, ... for each segment opened: tells apart segments of older writers.
  uint64_t segment_no() const { return segment_no_; }

  // Makes the next chunk (in order) current; false when there is none left.
  bool NextChunk();
  bool in_chunk() const { return in_chunk_; }
  const ChunkRef& chunk() const { return *chunk_; }

  enum Step { kRecord, kChunkEnd, kDamage };
  // The next record of the current chunk: kRecord with *p and *len set; kChunkEnd at
  // the end of its data; kDamage when the chunk ends at damage (counted).
  Step NextRecord(const uint8_t** p, uint64_t* len);

  // The clock of the current chunk's walk (record_parse.h): NextChunk resets it, and so does
  // damage skipped inside the chunk; ParseRecord moves it on.
  ChunkClock* clock() { return &clock_; }
  // A compact event of the current chunk that its clock cannot date: lost (damage).
  void LoseEvent();

  // Calls f(p, len) for every record of every chunk of the segment, in chunk order,
  // each chunk up to its end or its first damage (not counted here).
  template <class F>
  void ForEachRecord(F f);

 private:
  void Scan(uint64_t size, uint32_t hsize, uint32_t csize);
  // The open raw segment's header read again, checked as Open checks it (a live read's Resume).
  int RereadHeader(SegmentHeaderRead* out, std::string* error);
  // order_ from the chunks in file order: each thread's chunks in seq order, interleaved with
  // the other threads in file order (seq gaps counted).
  void Order(const std::vector<ChunkRef>& file_order, bool count_gaps);
  // A live read: each chunk's `cap`, the end of the records its walk (ForEachRecord's) meets now.
  void TakeCaps();
  // The chunk header of slot k read into *ref (its thread, seq and seal); 1: a chunk, 0: not
  // published yet, -1: damage or not readable.
  int ReadChunkRef(uint64_t k, uint64_t avail, ChunkRef* ref);
  // A live read's memory of each slot (chunk index in the file): where its records were read
  // to, the clock there, and whether it was read to its seal (done: never read again).
  struct LiveSlot {
    uint64_t pos = nvtx_record::kChunkHeaderSize;
    ChunkClock clock;
    bool done = false;
    bool seen = false;  // published, its header read
    ChunkRef ref{};
  };
  std::vector<LiveSlot> slots_;
  bool live_ = false, live_failed_ = false;
  // The end of a chunk's walk in a live read: remembered for the next read.
  void KeepPlace();
  Step WalkRecord(const uint8_t** p, uint64_t* len);  // (NextRecord's walk)
  // After chunk k (unpublished) of a raw file: the chunks wholly in the hole after it counted
  // unpublished, skipped; returns the last one skipped (k: none).
  uint64_t SkipHole(uint64_t k, uint64_t count, uint32_t hsize, uint32_t csize);
  uint64_t file_size_ = 0;
  // pread on the segment (raw or packed): n bytes at off; -1 on error.
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off);
  // Reads chunk c (data_: its bytes, in buf_ or in place); returns the bytes read (<= c.available).
  uint64_t ReadChunk(const ChunkRef& c);
  // The bytes of data_ (n read) that hold c's records: up to a seal, else all.
  static uint64_t RecordsEnd(const ChunkRef& c, uint64_t n) {
    return c.sealed_end && c.sealed_end < n ? c.sealed_end : n;
  }

  NvtxrStats& stats_;
  FileDescriptor fd_;
  PackedSegment packed_;  // open when the segment is packed (fd_ then is not)
  uint64_t segment_no_ = 0;
  NvtxrSegmentInfo info_{};
  nvtx_record::SegmentHeader header_{};
  std::vector<ChunkRef> order_;
  size_t next_chunk_ = 0;
  std::vector<uint8_t> buf_;       // the chunk being decoded, read (raw) or unpacked across frames
  const uint8_t* data_ = nullptr;  // its bytes: buf_, or a packed segment's frame in place
  bool in_chunk_ = false;
  const ChunkRef* chunk_ = nullptr;
  uint64_t pos_ = 0, end_ = 0;  // offsets into buf_
  bool damaged_ = false;        // the current chunk was counted as damaged
  bool whole_ = false;          // buf_[0, end_) is all the writer wrote into the chunk
  ChunkClock clock_;
  // Damage inside a chunk (NextRecord): whether buf_[from, to) is all zero; the first
  // offset >= from, a multiple of 8 apart, where a valid full-form record starts (end_ if none).
  bool AllZero(uint64_t from, uint64_t to) const;
  uint64_t ResyncFrom(uint64_t from) const;
  uint64_t LastNonZeroEnd(uint64_t from, uint64_t to) const;  // end of the last non-zero byte (from if none)
  static constexpr uint64_t kLostEventBytes = 40;             // the largest event record without a payload block
  // The end of data of an unsealed chunk at `at`, a zero word (record_format.h): what
  // follows it, up to its last non-zero byte, fits in the record that starts there, as
  // long as its body's words say it can be (TornRecordEnd: the furthest it can end).
  bool IsEndOfData(uint64_t at) const;
  uint64_t TornRecordEnd(uint64_t at) const;
  // Reads buf_[from, end_) of the current chunk again (a live writer's chunk).
  void Reread(uint64_t from);
  static constexpr int kMaxRereads = 16;  // per chunk
  int rereads_ = 0;
};

template <class F>
void SegmentCursor::ForEachRecord(F f) {
  // The records the walk of Next reads, without counting anything: a zero word ends the
  // chunk's records at the end of data (only zeros after it, or in an unsealed chunk a torn
  // record); anything else, damage, resumes at the next full-form record, as Next does (the
  // definitions after damage name the events read after it).
  for (const ChunkRef& c : order_) {
    chunk_ = &c;
    end_ = RecordsEnd(c, ReadChunk(c));
    uint64_t pos = c.from;
    while (pos + 8 <= end_) {
      const uint8_t* r = data_ + pos;
      const uint64_t len = Load64(r) == 0 ? 0 : RecordLength(r, end_ - pos);
      if (len == 0) {
        if (Load64(r) == 0 && (AllZero(pos, end_) || (!c.sealed_end && IsEndOfData(pos)))) break;
        pos = ResyncFrom(pos + 8);
        continue;
      }
      f(r, len);
      pos += len;
    }
  }
  chunk_ = nullptr;
  end_ = 0;
}

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_SEGMENT_CURSOR_H_
