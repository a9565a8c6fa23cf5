// A packed segment (PID-START.nvtxsegz, nvtx_plugins_tf/recorder/recording/packed.py: a
// closed segment compressed chunk by chunk, each chunk a Zstandard frame of its own) read
// as the raw segment it holds, frame by frame, without unpacking it into a file first.
//
// Its frames are walked (and their CRC-32s checked) when it is opened, by the rules of
// packed.py's _unpack_into, the reference; what does not unpack is noted as a damage
// event (NvtxrUnpackDamage), which Python words as the copy path does, and reads as
// zeros, as in the copy. Frames are unpacked when first read (the cursor's scan of the
// chunk headers reads them all, in file order): into a cache of the caller's size (kept
// for the next segment opened: its pages are not touched anew), the rest into one frame's
// buffer each time they are read (a segment larger than the cache unpacks those frames
// again in each pass over its chunks, memory staying bounded).
//
// Zstandard and zlib (crc32) are not linked: they are opened at run time with dlopen
// (libzstd.so.1, libz.so.1); where either cannot be, Open notes kNvtxrUnpackUnavailable and
// Python unpacks the segment itself (packed.py).
#ifndef NVTX_PLUGINS_TF_READER_PACKED_SEGMENT_H_
#define NVTX_PLUGINS_TF_READER_PACKED_SEGMENT_H_

#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <vector>

#include "reader/decode.h"

namespace nvtx_reader {

// pread until n bytes or EOF/error; returns bytes read, -1 on error (errno set).
int64_t ReadFully(int fd, void* dst, uint64_t n, uint64_t off);

class PackedSegment {
 public:
  PackedSegment() = default;
  ~PackedSegment() { Close(); }
  PackedSegment(const PackedSegment&) = delete;
  PackedSegment& operator=(const PackedSegment&) = delete;

  // Opens `path` and walks its frames; `cache_bytes`: the cache's size (0: none). false
  // when it cannot be read as a raw segment at all (damage() says why: its header, version
  // or codec, or the file); frames that do not unpack are in damage() and read as zeros.
  bool Open(const char* path, uint64_t cache_bytes);
  void Close();
  bool is_open() const { return fd_ >= 0; }

  // Bytes of the raw segment (the copy's size: the header's raw_size, or the end of the
  // last frame past it; when the last frame unpacks, its end).
  uint64_t size() const { return size_; }
  // Where the last frame's bytes end (zeros from there on).
  uint64_t data_end() const { return frames_.empty() ? 0 : frames_.back().raw_offset + frames_.back().raw_len; }
  // pread on the raw segment: n bytes at off (fewer at its end); zeros where no frame unpacks.
  uint64_t Read(void* dst, uint64_t n, uint64_t off);
  // The bytes of [off, off + n) in place when one frame holds them all (else nullptr);
  // *got: how many there are (fewer at the segment's end).
  const uint8_t* Bytes(uint64_t off, uint64_t n, uint64_t* got);

  const std::vector<NvtxrUnpackDamage>& damage() const { return damage_; }
  void ClearDamage();

 private:
  struct Frame {
    uint64_t index;        // in the file (0: the segment's header, k: chunk k - 1)
    uint64_t file_offset;  // of its packed bytes
    uint64_t raw_offset;   // in the raw segment
    uint32_t packed_len, raw_len, crc;
    int64_t cached;  // offset in the cache, -1: not there
    bool failed;     // its bytes did not unpack (noted; read as zeros)
  };
  void Note(int64_t code, int64_t a, int64_t b);
  // The unpacked bytes of frames_[i] (nullptr: they do not unpack, noted once).
  const uint8_t* Unpack(size_t i);
  // Index in frames_ of the last frame starting at or before raw offset off (frames_.size()
  // when none).
  size_t FrameAt(uint64_t off) const;

  int fd_ = -1;
  void* dctx_ = nullptr;  // Zstandard's decompression context
  uint64_t size_ = 0;
  std::vector<Frame> frames_;  // the frames that may unpack, in order
  std::vector<NvtxrUnpackDamage> damage_;
  std::vector<uint8_t> packed_;         // one frame's packed bytes
  std::unique_ptr<uint8_t[]> scratch_;  // one frame unpacked (not cached), scratch_bytes_
  uint64_t scratch_bytes_ = 0;
  int64_t scratch_frame_ = -1;
  uint8_t* cache_ = nullptr;  // cache_bytes_, frames unpacked in the order they were first read
  uint64_t cache_used_ = 0, cache_bytes_ = 0;
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_PACKED_SEGMENT_H_
