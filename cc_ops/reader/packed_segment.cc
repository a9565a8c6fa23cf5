#include "reader/packed_segment.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>

namespace nvtx_reader {

namespace {

// packed.py's layout (little-endian): PackHeader (64 bytes), then frames, each a FrameHeader
// (16 bytes) and its packed bytes.
constexpr char kPackMagic[8] = {'N', 'V', 'T', 'X', 'S', 'E', 'G', 'Z'};
constexpr uint32_t kPackVersion = 1, kCodecZstd = 1;
#pragma pack(push, 1)
struct PackHeader {
  char magic[8];
  uint32_t version, codec;
  uint64_t raw_size;
  uint32_t header_size, chunk_size;
  uint64_t frames;
  uint8_t reserved[24];
};
struct FrameHeader {
  uint32_t packed_len, raw_len, crc, zero;
};
#pragma pack(pop)
static_assert(sizeof(PackHeader) == 64 && sizeof(FrameHeader) == 16, "packed.py's layout");

// The format's own limits (record_format.h; segment_cursor.cc checks a raw header by them),
// applied to a pack header before anything is sized by it.
constexpr uint32_t kMinHeaderSize = 24, kMaxHeaderSize = 1u << 20;
constexpr uint32_t kMinChunkSize = 4096, kMaxChunkSize = 1u << 30;
// The most raw bytes a Zstandard frame can give a packed byte: a 4-byte RLE block (3 bytes
// of header, 1 of value) regenerates at most a block, 128 KiB. A raw length past
// packed_len * kMaxRatio cannot be the frame's: damage, found before any buffer is sized.
constexpr uint64_t kMaxRatio = (128u << 10) / 4;
constexpr unsigned long long kContentSizeUnknown = 0ULL - 1, kContentSizeError = 0ULL - 2;

// libzstd and libz, opened once per process (dlopen; RTLD_DEEPBIND: the library's own
// symbols first, whatever copies of them the process has loaded globally).
struct Codec {
  void* (*create_dctx)();
  size_t (*free_dctx)(void*);
  size_t (*decompress_dctx)(void*, void*, size_t, const void*, size_t);
  unsigned (*is_error)(size_t);
  unsigned long (*crc32)(unsigned long, const unsigned char*, unsigned);
  unsigned long long (*content_size)(const void*, size_t);  // (may be null: libzstd < 1.3)
  bool ok;
};

const Codec& GetCodec() {
  static Codec codec = [] {
    Codec c{};
    void* zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    void* zlib = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!zstd || !zlib) return c;
    c.create_dctx = reinterpret_cast<void* (*)()>(dlsym(zstd, "ZSTD_createDCtx"));
    c.free_dctx = reinterpret_cast<size_t (*)(void*)>(dlsym(zstd, "ZSTD_freeDCtx"));
    c.decompress_dctx =
        reinterpret_cast<size_t (*)(void*, void*, size_t, const void*, size_t)>(dlsym(zstd, "ZSTD_decompressDCtx"));
    c.is_error = reinterpret_cast<unsigned (*)(size_t)>(dlsym(zstd, "ZSTD_isError"));
    c.content_size =
        reinterpret_cast<unsigned long long (*)(const void*, size_t)>(dlsym(zstd, "ZSTD_getFrameContentSize"));
    c.crc32 = reinterpret_cast<unsigned long (*)(unsigned long, const unsigned char*, unsigned)>(dlsym(zlib, "crc32"));
    c.ok = c.create_dctx && c.free_dctx && c.decompress_dctx && c.is_error && c.crc32;
    return c;  // (never closed: loaded once per process)
  }();
  return codec;
}

// The frame caches of the segments not open (their pages touched once), with their sizes.
std::mutex cache_mu;
std::vector<std::pair<uint8_t*, uint64_t>> idle_caches;
constexpr size_t kIdleCaches = 4;

uint8_t* TakeCache(uint64_t bytes) {
  if (bytes == 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    for (size_t i = 0; i < idle_caches.size(); ++i) {
      if (idle_caches[i].second != bytes) continue;
      uint8_t* c = idle_caches[i].first;
      idle_caches.erase(idle_caches.begin() + static_cast<std::ptrdiff_t>(i));
      return c;
    }
  }
  return static_cast<uint8_t*>(malloc(bytes));  // (untouched until used)
}

void GiveCache(uint8_t* c, uint64_t bytes) {
  if (!c) return;
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (idle_caches.size() < kIdleCaches) {
      idle_caches.emplace_back(c, bytes);
      return;
    }
  }
  free(c);
}

// Whether a frame of packed_len bytes (`packed`, when read) can hold raw_len raw bytes: not
// more than Zstandard's most, and what its own header says it holds when it says it.
bool FrameHolds(const Codec& codec, const uint8_t* packed, uint32_t packed_len, uint32_t raw_len) {
  if (raw_len > packed_len * kMaxRatio) return false;
  if (!packed || !codec.content_size) return true;
  const unsigned long long n = codec.content_size(packed, packed_len);
  return n == kContentSizeUnknown || (n != kContentSizeError && n == raw_len);
}

}  // namespace

int64_t ReadFully(int fd, void* dst, uint64_t n, uint64_t off) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  uint64_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, out + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return got ? static_cast<int64_t>(got) : -1;
    if (r == 0) break;
    got += static_cast<uint64_t>(r);
  }
  return static_cast<int64_t>(got);
}

void PackedSegment::Note(int64_t code, int64_t a, int64_t b) { damage_.push_back({code, a, b}); }

bool PackedSegment::Open(const char* path, uint64_t cache_bytes) {
  Close();
  damage_.clear();
  const Codec& codec = GetCodec();
  if (!codec.ok) {
    Note(kNvtxrUnpackUnavailable, 0, 0);
    return false;
  }
  fd_ = ::open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd_ < 0 || fstat(fd_, &st) != 0) {
    Note(kNvtxrUnpackOsError, errno, 0);
    Close();
    return false;
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  PackHeader h;
  int64_t got = ReadFully(fd_, &h, sizeof(h), 0);
  if (got < 0) {
    Note(kNvtxrUnpackOsError, errno, 0);
    Close();
    return false;
  }
  if (got < static_cast<int64_t>(sizeof(h)) || memcmp(h.magic, kPackMagic, sizeof(kPackMagic)) != 0) {
    Note(kNvtxrUnpackNotPacked, 0, 0);
    Close();
    return false;
  }
  if (h.version != kPackVersion || h.codec != kCodecZstd) {
    Note(kNvtxrUnpackUnknown, h.version, h.codec);
    Close();
    return false;
  }
  if (h.header_size < kMinHeaderSize || h.header_size > kMaxHeaderSize || h.chunk_size < kMinChunkSize ||
      h.chunk_size > kMaxChunkSize || h.chunk_size % kMinChunkSize != 0) {
    Note(kNvtxrUnpackHeader, 0, 0);  // (sizes no packer writes: nothing is sized by them)
    Close();
    return false;
  }
  size_ = h.raw_size;
  dctx_ = codec.create_dctx();
  if (!dctx_) throw std::bad_alloc();
  // The walk of _unpack_into (packed.py): each frame's header, its packed bytes whole and
  // their CRC; a frame whose bytes are not all there ends the walk (the frames' bounds are
  // lost from there on). A frame holds its chunk whole (header_size or chunk_size bytes), the
  // last one at most that: the raw size ends with it (a frame's raw bytes are then always in
  // one frame, never assembled from a declared size).
  uint64_t pos = sizeof(h), raw_offset = 0, walked = 0;
  const uint64_t frames = h.frames;
  for (uint64_t k = 0; k < frames; ++k) {
    const uint64_t expected = k == 0 ? h.header_size : h.chunk_size;
    FrameHeader fh;
    got = ReadFully(fd_, &fh, sizeof(fh), pos);
    if (got < 0) {
      damage_.clear();
      Note(kNvtxrUnpackOsError, errno, 0);
      Close();
      return false;
    }
    if (got < static_cast<int64_t>(sizeof(fh))) {
      Note(kNvtxrUnpackTruncated, static_cast<int64_t>(k),
           static_cast<int64_t>(std::min<uint64_t>(frames - k, INT64_MAX)));
      break;
    }
    pos += sizeof(fh);
    bool whole = fh.packed_len <= 2 * expected + 4096 && fh.packed_len <= file_size - std::min(file_size, pos);
    bool ok = false;
    const bool last = k + 1 == frames;
    if (whole) {
      packed_.resize(fh.packed_len);
      got = ReadFully(fd_, packed_.data(), fh.packed_len, pos);
      whole = got == static_cast<int64_t>(fh.packed_len);
      ok = whole && (last ? fh.raw_len <= expected : fh.raw_len == expected) &&
           codec.crc32(0, packed_.data(), fh.packed_len) == fh.crc &&
           FrameHolds(codec, packed_.data(), fh.packed_len, fh.raw_len);
    }
    if (!ok && k == 0) {
      damage_.clear();
      Note(kNvtxrUnpackHeader, 0, 0);
      Close();
      return false;
    }
    if (!whole) {
      Note(kNvtxrUnpackLostFrom, static_cast<int64_t>(k),
           static_cast<int64_t>(std::min<uint64_t>(frames - k, INT64_MAX)));
      break;
    }
    if (ok) {
      frames_.push_back({k, pos, raw_offset, fh.packed_len, fh.raw_len, fh.crc, -1, false});
      // (the copy grows past raw_size; it ends with the last frame)
      size_ = last ? raw_offset + fh.raw_len : std::max<uint64_t>(size_, raw_offset + fh.raw_len);
    } else {
      Note(kNvtxrUnpackFrame, static_cast<int64_t>(k), 0);
    }
    pos += fh.packed_len;
    raw_offset += expected;
    walked = k + 1;
  }
  // Bytes past the last frame the header counts: frames it does not count (a packer writes
  // none), lost unless said.
  if (walked == frames && pos < file_size)
    Note(kNvtxrUnpackTrailing, static_cast<int64_t>(frames), static_cast<int64_t>(file_size - pos));
  cache_ = TakeCache(cache_bytes);
  cache_bytes_ = cache_ ? cache_bytes : 0;
  if (!frames_.empty() && frames_[0].index == 0 && !Unpack(0)) {
    damage_.clear();
    Note(kNvtxrUnpackHeader, 0, 0);
    Close();
    return false;
  }
  return true;
}

void PackedSegment::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (dctx_) GetCodec().free_dctx(dctx_);
  dctx_ = nullptr;
  GiveCache(cache_, cache_bytes_);
  cache_ = nullptr;
  cache_bytes_ = 0;
  cache_used_ = 0;
  frames_.clear();
  scratch_frame_ = -1;
  size_ = 0;
  if (scratch_bytes_ > (4u << 20)) {
    scratch_.reset();
    scratch_bytes_ = 0;
  }
  if (packed_.size() > (4u << 20)) {
    packed_.clear();
    packed_.shrink_to_fit();
  }
}

void PackedSegment::ClearDamage() { damage_.clear(); }

size_t PackedSegment::FrameAt(uint64_t off) const {
  // the last frame starting at or before off
  auto it = std::upper_bound(frames_.begin(), frames_.end(), off,
                             [](uint64_t o, const Frame& f) { return o < f.raw_offset; });
  if (it == frames_.begin()) return frames_.size();
  return static_cast<size_t>(it - frames_.begin()) - 1;
}

const uint8_t* PackedSegment::Unpack(size_t i) {
  Frame& f = frames_[i];
  if (f.failed) return nullptr;
  if (f.cached >= 0) return cache_ + f.cached;
  if (scratch_frame_ == static_cast<int64_t>(i)) return scratch_.get();
  const Codec& codec = GetCodec();
  packed_.resize(f.packed_len);
  uint8_t* dst;
  const bool cache = cache_ && cache_used_ + f.raw_len <= cache_bytes_;
  if (cache) {
    dst = cache_ + cache_used_;
  } else {
    if (scratch_bytes_ < f.raw_len) {
      // (not zero-filled: only the pages Zstandard really writes are touched)
      scratch_.reset();
      scratch_.reset(new uint8_t[f.raw_len]);
      scratch_bytes_ = f.raw_len;
    }
    scratch_frame_ = -1;
    dst = scratch_.get();
  }
  size_t n = 0;
  bool ok = ReadFully(fd_, packed_.data(), f.packed_len, f.file_offset) == static_cast<int64_t>(f.packed_len);
  if (ok) {
    n = codec.decompress_dctx(dctx_, dst, f.raw_len, packed_.data(), f.packed_len);
    ok = !codec.is_error(n) && n == f.raw_len;
  }
  if (!ok) {
    f.failed = true;
    Note(kNvtxrUnpackFrame, static_cast<int64_t>(f.index), 0);
    return nullptr;
  }
  if (cache) {
    f.cached = static_cast<int64_t>(cache_used_);
    cache_used_ += (f.raw_len + 63) & ~uint64_t(63);
  } else {
    scratch_frame_ = static_cast<int64_t>(i);
  }
  return dst;
}

const uint8_t* PackedSegment::Bytes(uint64_t off, uint64_t n, uint64_t* got) {
  *got = off < size_ ? std::min(n, size_ - off) : 0;
  const size_t i = FrameAt(off);
  if (i >= frames_.size()) return nullptr;
  const Frame& f = frames_[i];
  if (off + *got > f.raw_offset + f.raw_len) return nullptr;
  const uint8_t* p = Unpack(i);
  return p ? p + (off - f.raw_offset) : nullptr;
}

uint64_t PackedSegment::Read(void* dst, uint64_t n, uint64_t off) {
  if (off >= size_) return 0;
  const uint64_t end = std::min(size_, off + std::min(n, size_ - off));
  uint8_t* out = static_cast<uint8_t*>(dst);
  memset(out, 0, end - off);  // (where no frame unpacks: zeros, as in the copy)
  size_t i = FrameAt(off);
  if (i >= frames_.size()) i = 0;
  for (; i < frames_.size() && frames_[i].raw_offset < end; ++i) {
    const Frame& f = frames_[i];
    const uint64_t from = std::max(off, f.raw_offset), to = std::min(end, f.raw_offset + f.raw_len);
    if (from >= to) continue;
    const uint8_t* p = Unpack(i);
    if (p) memcpy(out + (from - off), p + (from - f.raw_offset), to - from);
  }
  return end - off;
}

}  // namespace nvtx_reader
