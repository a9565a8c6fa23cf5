// The C API of the decoder (decode.h) over nvtx_reader::Decoder (decoder.h). No C++
// exception crosses it.
#include "reader/decode.h"

#include <string.h>

#include <algorithm>
#include <new>
#include <string>

#include "reader/decoder.h"
#include "reader/record_parse.h"
#include "reader/segment_cursor.h"

namespace {

using nvtx_reader::Decoder;

constexpr uint32_t kAbiVersion = 17;

void SetError(char* err, uint32_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  size_t n = std::min<size_t>(message.size(), err_len - 1);
  memcpy(err, message.data(), n);
  err[n] = 0;
}

Decoder* D(void* ctx) { return static_cast<Decoder*>(ctx); }

// text, cut to size - 1 bytes, into a NUL-padded field of size bytes.
template <size_t size>
void SetField(char (&field)[size], const char* text) {
  size_t n = text ? strnlen(text, size - 1) : 0;
  memset(field, 0, size);
  memcpy(field, text, n);
}

// nvtxr_peek_segment (lenient) and nvtxr_read_segment_header.
int HeaderInfo(const char* path, bool lenient, NvtxrSegmentInfo* out, char* err, uint32_t err_len) {
  if (!path || !out) return -1;
  try {
    nvtx_reader::FileDescriptor fd;
    nvtx_reader::SegmentHeaderRead read;
    std::string error;
    int rc = nvtx_reader::ReadSegmentHeader(path, lenient, &fd, &read, &error);
    if (rc != 0) {
      SetError(err, err_len, error);
      return rc;
    }
    nvtx_reader::FillSegmentInfo(read.header, out);
    return 0;
  } catch (...) {
    SetError(err, err_len, "out of memory");
    return -1;
  }
}

void AddShift(uint64_t* t, int64_t shift_ns) { *t += static_cast<uint64_t>(shift_ns); }

// Element `index` of a table into *out; -1 when out of range.
template <class Table, class T>
int CopyOut(const Table& table, uint32_t index, T* out) {
  if (!out || index >= table.size()) return -1;
  *out = table[index];
  return 0;
}

}  // namespace

NVTXR_API uint32_t nvtxr_abi_version(void) { return kAbiVersion; }

NVTXR_API void* nvtxr_new(void) { return new (std::nothrow) Decoder(); }

NVTXR_API void nvtxr_free(void* ctx) { delete D(ctx); }

namespace {

int OpenSegment(void* ctx, const char* path, bool packed, uint64_t cache_bytes, char* err, uint32_t err_len) {
  if (!ctx || !path) return -1;
  try {
    std::string error;
    int rc = D(ctx)->Open(path, packed, cache_bytes, &error);
    if (rc != 0) SetError(err, err_len, error);
    return rc;
  } catch (...) {
    SetError(err, err_len, "out of memory");
    return -1;
  }
}

}  // namespace

NVTXR_API int nvtxr_open_segment(void* ctx, const char* path, char* err, uint32_t err_len) {
  return OpenSegment(ctx, path, /*packed=*/false, 0, err, err_len);
}

NVTXR_API int nvtxr_open_packed(void* ctx, const char* path, uint64_t cache_bytes, char* err, uint32_t err_len) {
  return OpenSegment(ctx, path, /*packed=*/true, cache_bytes, err, err_len);
}

NVTXR_API int nvtxr_open_live(void* ctx, const char* path, char* err, uint32_t err_len) {
  if (!ctx || !path) return -1;
  try {
    std::string error;
    int rc = D(ctx)->OpenLive(path, &error);
    if (rc != 0) SetError(err, err_len, error);
    return rc;
  } catch (...) {
    SetError(err, err_len, "out of memory");
    return -1;
  }
}

NVTXR_API int nvtxr_resume(void* ctx, char* err, uint32_t err_len) {
  if (!ctx) return -1;
  try {
    std::string error;
    int rc = D(ctx)->Resume(&error);
    if (rc != 0) SetError(err, err_len, error.empty() ? "not a live read" : error);
    return rc;
  } catch (...) {
    SetError(err, err_len, "out of memory");
    return -1;
  }
}

NVTXR_API int nvtxr_live_failed(void* ctx) { return ctx && D(ctx)->LiveFailed() ? 1 : 0; }

NVTXR_API int64_t nvtxr_unpack_damage(void* ctx, NvtxrUnpackDamage* out, int64_t capacity) {
  if (!ctx) return 0;
  const std::vector<NvtxrUnpackDamage>& damage = D(ctx)->unpack_damage();
  const int64_t n = static_cast<int64_t>(damage.size());
  for (int64_t i = 0; out && i < std::min(n, capacity); ++i) out[i] = damage[static_cast<size_t>(i)];
  return n;
}

NVTXR_API int nvtxr_segment_info(void* ctx, NvtxrSegmentInfo* out) {
  if (!ctx || !out) return -1;
  return D(ctx)->SegmentInfo(out) ? 0 : -1;
}

NVTXR_API int nvtxr_peek_segment(const char* path, NvtxrSegmentInfo* out) {
  return HeaderInfo(path, /*lenient=*/true, out, nullptr, 0);
}

NVTXR_API int nvtxr_read_segment_header(const char* path, NvtxrSegmentInfo* out, char* err, uint32_t err_len) {
  return HeaderInfo(path, /*lenient=*/false, out, err, err_len);
}

NVTXR_API int nvtxr_rewrite_segment_header(uint8_t* buf, uint64_t len, int64_t shift_ns, int64_t parent_shift_ns,
                                           int64_t pid, int64_t ppid, int64_t parent_pid, const char* process_name,
                                           const char* cmdline) {
  using nvtx_record::SegmentHeader;
  SegmentHeader h;
  const uint64_t n = std::min<uint64_t>(len, sizeof(h));
  if (!buf || n < nvtx_record::kHeaderV1End) return -2;
  memcpy(&h, buf, n);
  if (memcmp(h.magic, nvtx_record::kSegmentMagic, sizeof(h.magic)) != 0) return -2;
  h.pid = pid;
  h.ppid = ppid;
  AddShift(&h.start_ns, shift_ns);
  SetField(h.process_name, process_name);
  SetField(h.cmdline, cmdline);
  // The fields after cmdline, read (as by ReadSegmentHeader) only from headers this long.
  if (std::min<uint64_t>(n, h.header_size) >= sizeof(SegmentHeader)) {
    if (h.process_start_ns) AddShift(&h.process_start_ns, shift_ns);
    if (h.parent_process_start_ns) AddShift(&h.parent_process_start_ns, parent_shift_ns);
    h.parent_pid = parent_pid;
  }
  memcpy(buf, &h, n);
  return 0;
}

NVTXR_API int nvtxr_rewrite_chunk(uint8_t* buf, uint64_t len, int64_t shift_ns, int64_t old_pid, int64_t new_pid) {
  nvtx_record::ChunkHeader ch;
  if (!buf || len < sizeof(ch)) return 1;
  memcpy(&ch, buf, sizeof(ch));
  if (ch.magic != nvtx_record::kChunkMagic) return 1;
  if (ch.tid == old_pid) ch.tid = new_pid;
  // A sealed chunk is sealed anew over the rewritten records, but only if its seal held
  // before: damage is never laundered into a valid seal.
  bool reseal = false;
  uint64_t records_end = len;
  if (ch.sealed_end >= nvtx_record::kChunkHeaderSize && ch.sealed_end <= len && ch.sealed_end % 8 == 0) {
    uint64_t sum1, sum2;
    nvtx_record::ChunkSums(buf, ch.sealed_end, &sum1, &sum2);
    reseal = sum1 == ch.sum1 && sum2 == ch.sum2;
    records_end = ch.sealed_end;
  }
  auto walk = nvtx_reader::ForEachRecordIn(
      buf, records_end, [&](uint8_t* p, uint64_t) { nvtx_reader::RebaseRecord(p, shift_ns, old_pid, new_pid); });
  if (reseal) nvtx_record::ChunkSums(buf, ch.sealed_end, &ch.sum1, &ch.sum2);
  memcpy(buf, &ch, sizeof(ch));
  return walk == nvtx_reader::ChunkWalk::kDamage ? -2 : 0;
}

NVTXR_API int64_t nvtxr_next(void* ctx, NvtxrRow* rows, int64_t capacity) {
  if (!ctx || !rows || capacity <= 0) return 0;
  try {
    return D(ctx)->Next(rows, capacity);
  } catch (...) {
    return -1;
  }
}

NVTXR_API void nvtxr_close_segment(void* ctx) {
  if (ctx) D(ctx)->CloseSegment();
}

NVTXR_API void nvtxr_finish(void* ctx) {
  if (!ctx) return;
  try {
    D(ctx)->Finish();
  } catch (...) {
  }
}

NVTXR_API void nvtxr_stats(void* ctx, NvtxrStats* out) {
  if (ctx && out) *out = D(ctx)->stats();
}

NVTXR_API uint32_t nvtxr_string_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(D(ctx)->tables().strings().size()) : 0;
}

NVTXR_API const char* nvtxr_string(void* ctx, uint32_t index, uint32_t* length) {
  if (!ctx) return nullptr;
  const auto& strings = D(ctx)->tables().strings();
  if (index >= strings.size()) return nullptr;
  const std::string& s = strings[index];
  if (length) *length = static_cast<uint32_t>(s.size());
  return s.data();
}

NVTXR_API uint32_t nvtxr_strings(void* ctx, uint32_t first, uint32_t count, char* buf, uint64_t buf_len,
                                 uint32_t* lengths) {
  if (!ctx || !buf || !lengths) return 0;
  const auto& strings = D(ctx)->tables().strings();
  uint32_t done = 0;
  uint64_t used = 0;
  for (uint64_t i = first; i < strings.size() && done < count; ++i) {
    const std::string& s = strings[i];
    if (used + s.size() > buf_len) {
      if (done == 0 && s.size() > buf_len) return 0;
      break;
    }
    memcpy(buf + used, s.data(), s.size());
    used += s.size();
    lengths[done++] = static_cast<uint32_t>(s.size());
  }
  return done;
}

NVTXR_API uint32_t nvtxr_domain_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(D(ctx)->tables().domains().size()) : 0;
}

NVTXR_API int nvtxr_domain(void* ctx, uint32_t index, NvtxrDomain* out) {
  return ctx ? CopyOut(D(ctx)->tables().domains(), index, out) : -1;
}

NVTXR_API uint32_t nvtxr_category_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(D(ctx)->tables().categories().size()) : 0;
}

NVTXR_API int nvtxr_category(void* ctx, uint32_t index, NvtxrCategory* out) {
  return ctx ? CopyOut(D(ctx)->tables().categories(), index, out) : -1;
}

NVTXR_API uint32_t nvtxr_thread_name_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(D(ctx)->tables().thread_names().size()) : 0;
}

NVTXR_API int nvtxr_thread_name(void* ctx, uint32_t index, NvtxrThreadName* out) {
  return ctx ? CopyOut(D(ctx)->tables().thread_names(), index, out) : -1;
}
