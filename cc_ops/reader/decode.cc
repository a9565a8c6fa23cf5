// Bounds-checked streaming decoder of NVTX recordings. See decode.h.
#include "reader/decode.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "recorder/record_format.h"

namespace {

using namespace nvtx_record;

constexpr uint32_t kAbiVersion = 1;
// SegmentHeader field offsets (record_format.h, little-endian x86_64).
constexpr size_t kOffVersion = 8, kOffHeaderSize = 12, kOffChunkSize = 16, kOffPid = 24,
                 kOffPpid = 32, kOffStartNs = 40, kOffStartRealNs = 48, kOffProcessName = 56,
                 kOffCmdline = 120, kHeaderFieldsEnd = 120 + 1024;
constexpr uint32_t kMaxChunkSize = 1u << 30;
constexpr uint32_t kDenseStringIds = 1u << 20;

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

struct ChunkRef {
  uint64_t offset;     // file offset of the chunk
  uint64_t available;  // bytes of the chunk present in the file (<= chunk_size)
  uint32_t thread_index;
  int64_t tid;
  uint64_t seq;
};

enum Phase { kIdle, kRecords, kFlush, kDone };

struct Context {
  // Global tables.
  std::deque<std::string> strings;
  std::unordered_map<std::string_view, uint32_t> string_index;
  std::vector<NvtxrDomain> domains;
  std::vector<NvtxrCategory> categories;
  std::unordered_map<uint64_t, uint32_t> category_index;  // (domain << 32 | category)
  std::vector<NvtxrThreadName> thread_names;
  std::unordered_map<std::string, uint32_t> thread_name_index;  // "pid:tid"
  NvtxrStats stats{};

  // Current segment.
  Phase phase = kIdle;
  const uint8_t* map = nullptr;
  size_t map_len = 0;
  NvtxrSegmentInfo info{};
  uint32_t header_size = 0;
  std::vector<ChunkRef> order;
  size_t next_chunk = 0;
  // Current chunk.
  bool in_chunk = false;
  const ChunkRef* chunk = nullptr;
  uint64_t pos = 0, end = 0;
  // Per-segment maps.
  std::vector<uint32_t> dense_strings;  // local id -> global index + 1 (0 = unknown)
  std::unordered_map<uint32_t, uint32_t> sparse_strings;
  std::unordered_map<uint32_t, uint32_t> local_domains;  // local id -> global index
  std::unordered_map<uint64_t, std::vector<NvtxrRow>> stacks;  // thread_index << 16 | domain
  std::unordered_map<uint64_t, NvtxrRow> open_starts;
  struct EarlyEnd {
    int64_t ts;
    int64_t tid;
  };
  std::unordered_map<uint64_t, EarlyEnd> early_ends;
  std::vector<NvtxrRow> pending;
  size_t pending_pos = 0;

  Context() {
    Intern(std::string_view());
    domains.push_back(NvtxrDomain{0, 0, 0, -1});
  }

  uint32_t Intern(std::string_view text) {
    auto it = string_index.find(text);
    if (it != string_index.end()) return it->second;
    uint32_t index = static_cast<uint32_t>(strings.size());
    strings.emplace_back(text);
    string_index.emplace(std::string_view(strings.back()), index);
    return index;
  }

  void DefineString(uint32_t local, uint32_t global) {
    if (local < kDenseStringIds) {
      if (dense_strings.size() <= local) dense_strings.resize(local + 1, 0);
      dense_strings[local] = global + 1;
    } else {
      sparse_strings[local] = global;
    }
  }

  // Global index of a local string id; false when never defined.
  bool LookupString(uint32_t local, uint32_t* global) const {
    if (local == 0) {
      *global = 0;
      return true;
    }
    if (local < kDenseStringIds) {
      if (local < dense_strings.size() && dense_strings[local] != 0) {
        *global = dense_strings[local] - 1;
        return true;
      }
      return false;
    }
    auto it = sparse_strings.find(local);
    if (it == sparse_strings.end()) return false;
    *global = it->second;
    return true;
  }

  uint32_t Domain(uint32_t local) {
    if (local == 0) return 0;
    auto it = local_domains.find(local);
    if (it != local_domains.end()) return it->second;
    uint32_t index = static_cast<uint32_t>(domains.size());
    domains.push_back(NvtxrDomain{info.pid, 0, local, -1});
    local_domains.emplace(local, index);
    return index;
  }

  void ResetSegment() {
    if (map) munmap(const_cast<uint8_t*>(map), map_len);
    map = nullptr;
    map_len = 0;
    phase = kIdle;
    order.clear();
    order.shrink_to_fit();
    next_chunk = 0;
    in_chunk = false;
    chunk = nullptr;
    dense_strings.clear();
    dense_strings.shrink_to_fit();
    sparse_strings.clear();
    local_domains.clear();
    stacks.clear();
    open_starts.clear();
    early_ends.clear();
    pending.clear();
    pending.shrink_to_fit();
    pending_pos = 0;
  }

  int Open(const char* path, char* err, uint32_t err_len);
  int64_t Next(NvtxrRow* rows, int64_t capacity);
  bool BeginChunk();
  // Decodes one record; returns true if it wrote a row into *row.
  bool Step(NvtxrRow* row);
  void Damage() {
    stats.damaged_chunks++;
    in_chunk = false;
  }
  void BuildPending();
};

void SetError(char* err, uint32_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  size_t n = std::min<size_t>(message.size(), err_len - 1);
  memcpy(err, message.data(), n);
  err[n] = 0;
}

int Context::Open(const char* path, char* err, uint32_t err_len) {
  ResetSegment();
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    SetError(err, err_len, std::string("cannot open ") + path + ": " + strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    SetError(err, err_len, std::string("not a regular file: ") + path);
    return -1;
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeaderFieldsEnd) {
    ::close(fd);
    stats.damaged_segments++;
    SetError(err, err_len, std::string("segment header truncated: ") + path);
    return -2;
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    SetError(err, err_len, std::string("cannot map ") + path + ": " + strerror(errno));
    return -1;
  }
  map = static_cast<const uint8_t*>(m);
  map_len = size;
  madvise(m, size, MADV_SEQUENTIAL);

  const uint8_t* h = map;
  uint32_t version = Load32(h + kOffVersion);
  uint32_t hsize = Load32(h + kOffHeaderSize);
  uint32_t csize = Load32(h + kOffChunkSize);
  const char* problem = nullptr;
  if (memcmp(h, kSegmentMagic, 8) != 0) problem = "bad segment magic";
  else if (version != kFormatVersion) problem = "unsupported format version";
  else if (hsize < kHeaderFieldsEnd || hsize > (1u << 20) || hsize % 8 != 0) problem = "bad header size";
  else if (csize < 4096 || csize > kMaxChunkSize || csize % 8 != 0) problem = "bad chunk size";
  else if (size < hsize) problem = "segment header truncated";
  if (problem) {
    ResetSegment();
    stats.damaged_segments++;
    SetError(err, err_len, std::string(problem) + ": " + path);
    return -2;
  }
  header_size = hsize;
  memset(&info, 0, sizeof(info));
  info.pid = static_cast<int64_t>(Load64(h + kOffPid));
  info.ppid = static_cast<int64_t>(Load64(h + kOffPpid));
  info.start_ns = Load64(h + kOffStartNs);
  info.start_realtime_ns = Load64(h + kOffStartRealNs);
  info.chunk_size = csize;
  memcpy(info.process_name, h + kOffProcessName, 63);
  info.process_name[63] = 0;
  memcpy(info.cmdline, h + kOffCmdline, 1023);
  info.cmdline[1023] = 0;

  // Scan chunk headers.
  uint64_t body = size - hsize;
  uint64_t count = (body + csize - 1) / csize;
  info.chunk_count = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
  std::vector<ChunkRef> file_order;
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t off = hsize + k * csize;
    uint64_t avail = std::min<uint64_t>(csize, size - off);
    if (avail < kChunkHeaderSize) {
      bool zero = true;
      for (uint64_t i = 0; i < avail; ++i) zero = zero && map[off + i] == 0;
      if (zero) stats.unpublished_chunks++;
      else stats.damaged_chunks++;
      continue;
    }
    uint32_t magic = Load32(map + off);
    if (magic == 0) {
      stats.unpublished_chunks++;
      continue;
    }
    if (magic != kChunkMagic) {
      stats.damaged_chunks++;
      continue;
    }
    ChunkRef ref;
    ref.offset = off;
    ref.available = avail;
    ref.thread_index = Load32(map + off + 4);
    ref.tid = static_cast<int64_t>(Load64(map + off + 8));
    ref.seq = Load64(map + off + 16);
    file_order.push_back(ref);
  }
  // Each thread's chunks in seq order, interleaved with the other threads in file order.
  std::unordered_map<uint32_t, std::vector<ChunkRef>> by_thread;
  for (const ChunkRef& c : file_order) by_thread[c.thread_index].push_back(c);
  for (auto& kv : by_thread) {
    auto& v = kv.second;
    std::stable_sort(v.begin(), v.end(), [](const ChunkRef& a, const ChunkRef& b) { return a.seq < b.seq; });
    for (size_t i = 0; i < v.size(); ++i) {
      uint64_t expected = i == 0 ? 0 : v[i - 1].seq + 1;
      if (v[i].seq != expected) stats.seq_gaps++;
    }
  }
  std::unordered_map<uint32_t, size_t> taken;
  order.reserve(file_order.size());
  for (const ChunkRef& c : file_order) order.push_back(by_thread[c.thread_index][taken[c.thread_index]++]);
  stats.segments++;
  phase = kRecords;
  return 0;
}

bool Context::BeginChunk() {
  if (next_chunk >= order.size()) return false;
  chunk = &order[next_chunk++];
  pos = chunk->offset + kChunkHeaderSize;
  end = chunk->offset + chunk->available;
  in_chunk = true;
  stats.chunks++;
  return true;
}

inline uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

bool Context::Step(NvtxrRow* row) {
  if (pos + 8 > end) {
    // Chunk exhausted without a zero word: fine when the chunk is complete, damage when
    // the file was cut inside it.
    if (chunk->available < info.chunk_size) stats.damaged_chunks++;
    in_chunk = false;
    return false;
  }
  const uint8_t* p = map + pos;
  uint64_t w0 = Load64(p);
  if (w0 == 0) {
    in_chunk = false;
    return false;
  }
  uint8_t kind = static_cast<uint8_t>(w0 & 0xff);
  uint8_t flags = static_cast<uint8_t>((w0 >> 8) & 0xff);
  uint32_t local_domain = static_cast<uint32_t>((w0 >> 16) & 0xffff);
  uint32_t msg = static_cast<uint32_t>(w0 >> 32);
  uint64_t remaining = end - pos;

  if (kind >= kRangePush && kind <= kMark) {
    uint8_t payload_type = (flags & kPayloadMask) >> kPayloadShift;
    if (payload_type > kPayloadFloat) {
      Damage();
      return false;
    }
    bool has_range_id = kind == kRangeStart || kind == kRangeEnd;
    bool has_attrs = (flags & (kFlagColor | kFlagCategory)) != 0;
    uint64_t len = 16 + (has_range_id ? 8 : 0) + (has_attrs ? 8 : 0) + (payload_type ? 8 : 0);
    if (len > remaining) {
      Damage();
      return false;
    }
    const uint8_t* q = p + 8;
    int64_t ts = static_cast<int64_t>(Load64(q));
    q += 8;
    uint64_t range_id = 0;
    if (has_range_id) {
      range_id = Load64(q);
      q += 8;
    }
    uint32_t color = 0, category = 0;
    if (has_attrs) {
      color = Load32(q);
      category = Load32(q + 4);
      q += 8;
    }
    uint64_t payload = 0;
    if (payload_type) payload = Load64(q);
    pos += len;
    stats.records++;
    stats.events++;
    int64_t tid = chunk->tid;

    if (kind == kRangePop) {
      auto it = stacks.find((uint64_t(chunk->thread_index) << 16) | local_domain);
      if (it == stacks.end() || it->second.empty()) {
        stats.unmatched_pops++;
        return false;
      }
      *row = it->second.back();
      it->second.pop_back();
      row->end_ns = ts;
      row->end_tid = tid;
      stats.rows++;
      return true;
    }
    if (kind == kRangeEnd) {
      auto it = open_starts.find(range_id);
      if (it == open_starts.end()) {
        early_ends[range_id] = EarlyEnd{ts, tid};
        return false;
      }
      *row = it->second;
      open_starts.erase(it);
      row->end_ns = ts;
      row->end_tid = tid;
      stats.rows++;
      return true;
    }
    NvtxrRow r;
    r.start_ns = ts;
    r.end_ns = ts;
    r.pid = info.pid;
    r.tid = tid;
    r.end_tid = tid;
    r.payload = payload;
    r.range_id = range_id;
    r.domain = Domain(local_domain);
    r.category = category;
    r.color = color;
    r.depth = 0;
    r.flags = 0;
    if (flags & kFlagColor) r.flags |= kNvtxrHasColor;
    if (flags & kFlagCategory) r.flags |= kNvtxrHasCategory;
    if (flags & kFlagRegisteredMessage) r.flags |= kNvtxrRegistered;
    uint32_t message = 0;
    if (!LookupString(msg, &message)) {
      r.flags |= kNvtxrUnknownString;
      message = 0;
    }
    r.message = message;
    r.payload_type = payload_type;
    if (kind == kMark) {
      r.kind = kNvtxrMark;
      *row = r;
      stats.rows++;
      return true;
    }
    if (kind == kRangePush) {
      r.kind = kNvtxrPushPop;
      auto& stack = stacks[(uint64_t(chunk->thread_index) << 16) | local_domain];
      r.depth = static_cast<int32_t>(stack.size());
      r.end_ns = -1;
      stack.push_back(r);
      return false;
    }
    // kRangeStart
    r.kind = kNvtxrStartEnd;
    auto early = early_ends.find(range_id);
    if (early != early_ends.end()) {
      r.end_ns = early->second.ts;
      r.end_tid = early->second.tid;
      early_ends.erase(early);
      *row = r;
      stats.rows++;
      return true;
    }
    r.end_ns = -1;
    auto ins = open_starts.emplace(range_id, r);
    if (!ins.second) {
      // Reused id while still open: the older one is lost (counted as unclosed).
      NvtxrRow old = ins.first->second;
      ins.first->second = r;
      old.flags |= kNvtxrUnclosed;
      old.end_ns = -1;
      *row = old;
      stats.unclosed++;
      stats.rows++;
      return true;
    }
    return false;
  }

  switch (kind) {
    case kStringDef: {
      if (remaining < 16) break;
      uint32_t n = Load32(p + 8);
      uint64_t len = 16 + Pad8(n);
      if (len > remaining) break;
      std::string_view text(reinterpret_cast<const char*>(p + 16), n);
      DefineString(msg, Intern(text));
      pos += len;
      stats.records++;
      return false;
    }
    case kDomainCreate: {
      if (remaining < 16) break;
      uint64_t ts = Load64(p + 8);
      uint32_t name = 0;
      bool named = LookupString(msg, &name);
      uint32_t global = Domain(local_domain);
      if (local_domain != 0) {
        NvtxrDomain& d = domains[global];
        if (d.name >= 0 && named && static_cast<uint32_t>(d.name) != name) {
          // The local id was reused for another domain.
          global = static_cast<uint32_t>(domains.size());
          domains.push_back(NvtxrDomain{info.pid, 0, local_domain, -1});
          local_domains[local_domain] = global;
        }
        NvtxrDomain& dd = domains[global];
        dd.create_ns = ts;
        if (named) dd.name = static_cast<int32_t>(name);
      }
      pos += 16;
      stats.records++;
      return false;
    }
    case kDomainDestroy:
      if (remaining < 16) break;
      pos += 16;
      stats.records++;
      return false;
    case kCategoryName: {
      if (remaining < 16) break;
      uint32_t category = Load32(p + 8);
      uint32_t name = 0;
      if (LookupString(msg, &name)) {
        uint32_t d = Domain(local_domain);
        uint64_t key = (uint64_t(d) << 32) | category;
        auto it = category_index.find(key);
        if (it == category_index.end()) {
          category_index.emplace(key, static_cast<uint32_t>(categories.size()));
          categories.push_back(NvtxrCategory{d, category, name, 0});
        } else {
          categories[it->second].name = name;
        }
      }
      pos += 16;
      stats.records++;
      return false;
    }
    case kThreadName: {
      if (remaining < 16) break;
      int64_t tid = static_cast<int64_t>(Load64(p + 8));
      uint32_t name = 0;
      if (LookupString(msg, &name)) {
        uint32_t ov = (flags & kFlagThreadNameOverride) ? 1 : 0;
        std::string key = std::to_string(info.pid) + ":" + std::to_string(tid);
        auto it = thread_name_index.find(key);
        if (it == thread_name_index.end()) {
          thread_name_index.emplace(key, static_cast<uint32_t>(thread_names.size()));
          thread_names.push_back(NvtxrThreadName{info.pid, tid, name, ov});
        } else {
          NvtxrThreadName& t = thread_names[it->second];
          if (ov || !t.override_) {
            t.name = name;
            t.override_ = ov;
          }
        }
      }
      pos += 16;
      stats.records++;
      return false;
    }
    default:
      break;
  }
  Damage();
  return false;
}

void Context::BuildPending() {
  pending.clear();
  pending_pos = 0;
  for (auto& kv : stacks) {
    for (NvtxrRow r : kv.second) {
      r.flags |= kNvtxrUnclosed;
      r.end_ns = -1;
      pending.push_back(r);
    }
  }
  for (auto& kv : open_starts) {
    NvtxrRow r = kv.second;
    r.flags |= kNvtxrUnclosed;
    r.end_ns = -1;
    pending.push_back(r);
  }
  std::sort(pending.begin(), pending.end(),
            [](const NvtxrRow& a, const NvtxrRow& b) { return a.start_ns < b.start_ns; });
  stats.unclosed += pending.size();
  stats.rows += pending.size();
  stats.unmatched_ends += early_ends.size();
  stacks.clear();
  open_starts.clear();
  early_ends.clear();
}

int64_t Context::Next(NvtxrRow* rows, int64_t capacity) {
  int64_t n = 0;
  while (n < capacity) {
    if (phase == kRecords) {
      if (!in_chunk) {
        if (!BeginChunk()) {
          BuildPending();
          phase = kFlush;
          continue;
        }
      }
      if (Step(&rows[n])) ++n;
    } else if (phase == kFlush) {
      if (pending_pos >= pending.size()) {
        phase = kDone;
        break;
      }
      size_t take = std::min<size_t>(pending.size() - pending_pos, static_cast<size_t>(capacity - n));
      memcpy(&rows[n], &pending[pending_pos], take * sizeof(NvtxrRow));
      pending_pos += take;
      n += static_cast<int64_t>(take);
    } else {
      break;
    }
  }
  return n;
}

}  // namespace

NVTXR_API uint32_t nvtxr_abi_version(void) { return kAbiVersion; }

NVTXR_API void* nvtxr_new(void) { return new (std::nothrow) Context(); }

NVTXR_API void nvtxr_free(void* ctx) {
  if (!ctx) return;
  Context* c = static_cast<Context*>(ctx);
  c->ResetSegment();
  delete c;
}

NVTXR_API int nvtxr_open_segment(void* ctx, const char* path, char* err, uint32_t err_len) {
  if (!ctx || !path) return -1;
  try {
    return static_cast<Context*>(ctx)->Open(path, err, err_len);
  } catch (...) {
    SetError(err, err_len, "out of memory");
    return -1;
  }
}

NVTXR_API int nvtxr_segment_info(void* ctx, NvtxrSegmentInfo* out) {
  if (!ctx || !out) return -1;
  Context* c = static_cast<Context*>(ctx);
  if (c->phase == kIdle) return -1;
  *out = c->info;
  return 0;
}

NVTXR_API int64_t nvtxr_next(void* ctx, NvtxrRow* rows, int64_t capacity) {
  if (!ctx || !rows || capacity <= 0) return 0;
  try {
    return static_cast<Context*>(ctx)->Next(rows, capacity);
  } catch (...) {
    return -1;
  }
}

NVTXR_API void nvtxr_close_segment(void* ctx) {
  if (ctx) static_cast<Context*>(ctx)->ResetSegment();
}

NVTXR_API void nvtxr_stats(void* ctx, NvtxrStats* out) {
  if (ctx && out) *out = static_cast<Context*>(ctx)->stats;
}

NVTXR_API uint32_t nvtxr_string_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(static_cast<Context*>(ctx)->strings.size()) : 0;
}

NVTXR_API const char* nvtxr_string(void* ctx, uint32_t index, uint32_t* length) {
  if (!ctx) return nullptr;
  Context* c = static_cast<Context*>(ctx);
  if (index >= c->strings.size()) return nullptr;
  const std::string& s = c->strings[index];
  if (length) *length = static_cast<uint32_t>(s.size());
  return s.data();
}

NVTXR_API uint32_t nvtxr_strings(void* ctx, uint32_t first, uint32_t count, char* buf,
                                 uint64_t buf_len, uint32_t* lengths) {
  if (!ctx || !buf || !lengths) return 0;
  Context* c = static_cast<Context*>(ctx);
  uint32_t done = 0;
  uint64_t used = 0;
  for (uint64_t i = first; i < c->strings.size() && done < count; ++i) {
    const std::string& s = c->strings[i];
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
  return ctx ? static_cast<uint32_t>(static_cast<Context*>(ctx)->domains.size()) : 0;
}

NVTXR_API int nvtxr_domain(void* ctx, uint32_t index, NvtxrDomain* out) {
  if (!ctx || !out) return -1;
  Context* c = static_cast<Context*>(ctx);
  if (index >= c->domains.size()) return -1;
  *out = c->domains[index];
  return 0;
}

NVTXR_API uint32_t nvtxr_category_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(static_cast<Context*>(ctx)->categories.size()) : 0;
}

NVTXR_API int nvtxr_category(void* ctx, uint32_t index, NvtxrCategory* out) {
  if (!ctx || !out) return -1;
  Context* c = static_cast<Context*>(ctx);
  if (index >= c->categories.size()) return -1;
  *out = c->categories[index];
  return 0;
}

NVTXR_API uint32_t nvtxr_thread_name_count(void* ctx) {
  return ctx ? static_cast<uint32_t>(static_cast<Context*>(ctx)->thread_names.size()) : 0;
}

NVTXR_API int nvtxr_thread_name(void* ctx, uint32_t index, NvtxrThreadName* out) {
  if (!ctx || !out) return -1;
  Context* c = static_cast<Context*>(ctx);
  if (index >= c->thread_names.size()) return -1;
  *out = c->thread_names[index];
  return 0;
}
