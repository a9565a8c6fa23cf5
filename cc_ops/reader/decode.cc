// Bounds-checked streaming decoder of NVTX recordings. See decode.h.
#include "reader/decode.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/record_format.h"

namespace {

using namespace nvtx_record;

constexpr uint32_t kAbiVersion = 2;
// SegmentHeader field offsets (record_format.h, little-endian x86_64).
constexpr size_t kOffVersion = 8, kOffHeaderSize = 12, kOffChunkSize = 16, kOffPid = 24,
                 kOffPpid = 32, kOffStartNs = 40, kOffStartRealNs = 48, kOffProcessName = 56,
                 kOffCmdline = 120, kHeaderFieldsEnd = 120 + 1024, kOffChunkCount = 1144,
                 kOffDropped = 1152, kOffProcessStart = 1160, kOffParentPid = 1168,
                 kOffParentStart = 1176, kOffInherited = 1184, kHeaderV2End = 1192;
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
inline uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

struct ChunkRef {
  uint64_t offset;     // file offset of the chunk
  uint64_t available;  // bytes of the chunk present in the file (<= chunk_size)
  uint32_t thread_index;
  int64_t tid;
  uint64_t seq;
  uint64_t thread_key;  // identity of the thread across the segments of its process
};

enum Phase { kIdle, kRecords, kDone, kFlush };

struct EarlyEnd {
  int64_t ts;
  int64_t tid;
};

// Everything known about one process (all its segments): ids are process-wide.
struct ProcState {
  int64_t pid = 0;
  int parent = -1;            // index of the parent's state, -1 when unknown
  uint32_t inherited = 0;     // string ids below this belong to the parent
  uint32_t dense_base = 0;
  bool has_base = false;
  std::vector<uint32_t> dense;  // local id - dense_base -> global index + 1 (0 = unknown)
  std::unordered_map<uint32_t, uint32_t> sparse;
  std::unordered_map<uint32_t, uint32_t> local_domains;  // local id -> global index
  std::unordered_map<uint64_t, std::vector<NvtxrRow>> stacks;  // thread key << 16 | domain
  std::unordered_map<uint64_t, NvtxrRow> open_starts;
  std::unordered_map<uint64_t, EarlyEnd> early_ends;
};

// Length of the record at p (remaining bytes available); 0 when it is damaged.
uint64_t RecordLength(const uint8_t* p, uint64_t remaining) {
  uint64_t w0 = Load64(p);
  uint8_t kind = static_cast<uint8_t>(w0 & 0xff);
  uint8_t flags = static_cast<uint8_t>((w0 >> 8) & 0xff);
  uint64_t len = 0;
  if (kind >= kRangePush && kind <= kMark) {
    uint8_t payload_type = (flags & kPayloadMask) >> kPayloadShift;
    if (payload_type > kPayloadFloat) return 0;
    bool has_range_id = kind == kRangeStart || kind == kRangeEnd;
    bool has_attrs = (flags & (kFlagColor | kFlagCategory)) != 0;
    len = 16 + (has_range_id ? 8 : 0) + (has_attrs ? 8 : 0) + (payload_type ? 8 : 0);
  } else if (kind == kStringDef) {
    if (remaining < 16) return 0;
    len = 16 + Pad8(Load32(p + 8));
  } else if (kind == kDomainCreate || kind == kDomainDestroy || kind == kCategoryName || kind == kThreadName) {
    len = 16;
  } else {
    return 0;
  }
  return len <= remaining ? len : 0;
}

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
  std::deque<ProcState> procs;
  std::map<std::pair<int64_t, uint64_t>, int> proc_index;  // (pid, process start) -> procs

  // Current segment.
  Phase phase = kIdle;
  int fd = -1;
  uint64_t file_size = 0;
  uint64_t segment_no = 0;
  NvtxrSegmentInfo info{};
  ProcState* proc = nullptr;
  uint32_t header_size = 0;
  std::vector<ChunkRef> order;
  size_t next_chunk = 0;
  std::vector<uint8_t> buf;  // the chunk being decoded
  // Current chunk (offsets into buf).
  bool in_chunk = false;
  const ChunkRef* chunk = nullptr;
  uint64_t pos = 0, end = 0;
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

  static void DefineString(ProcState* ps, uint32_t local, uint32_t global) {
    if (!ps->has_base) {
      ps->has_base = true;
      ps->dense_base = local & ~uint32_t(0xFFFF);
    }
    if (local >= ps->dense_base && local - ps->dense_base < kDenseStringIds) {
      uint32_t k = local - ps->dense_base;
      if (ps->dense.size() <= k) ps->dense.resize(std::max<size_t>(k + 1, ps->dense.size() * 2), 0);
      ps->dense[k] = global + 1;
    } else {
      ps->sparse[local] = global;
    }
  }

  // Global index of a local string id of the current process (or, for an inherited id,
  // of its parent); false when never defined.
  bool LookupString(uint32_t local, uint32_t* global) const {
    if (local == 0) {
      *global = 0;
      return true;
    }
    const ProcState* ps = proc;
    for (int hops = 0; ps && hops < 64; ++hops) {
      if (ps->has_base && local >= ps->dense_base && local - ps->dense_base < kDenseStringIds) {
        uint32_t k = local - ps->dense_base;
        if (k < ps->dense.size() && ps->dense[k] != 0) {
          *global = ps->dense[k] - 1;
          return true;
        }
      } else {
        auto it = ps->sparse.find(local);
        if (it != ps->sparse.end()) {
          *global = it->second;
          return true;
        }
      }
      if (ps->parent < 0 || local >= ps->inherited) break;
      ps = &procs[static_cast<size_t>(ps->parent)];
    }
    return false;
  }

  uint32_t Domain(uint32_t local) {
    if (local == 0) return 0;
    auto it = proc->local_domains.find(local);
    if (it != proc->local_domains.end()) return it->second;
    uint32_t index = static_cast<uint32_t>(domains.size());
    domains.push_back(NvtxrDomain{info.pid, 0, local, -1});
    proc->local_domains.emplace(local, index);
    return index;
  }

  void ResetSegment() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    file_size = 0;
    if (phase != kFlush) phase = kIdle;
    order.clear();
    order.shrink_to_fit();
    next_chunk = 0;
    in_chunk = false;
    chunk = nullptr;
    proc = nullptr;
    if (buf.size() > (1u << 20)) {
      buf.clear();
      buf.shrink_to_fit();
    }
  }

  int Open(const char* path, char* err, uint32_t err_len);
  void Scan(const uint8_t* h, uint64_t size, uint32_t hsize, uint32_t csize);
  void PrescanDefinitions();
  // Reads chunk c into buf; returns the bytes read (<= c.available).
  uint64_t ReadChunk(const ChunkRef& c);
  int64_t Next(NvtxrRow* rows, int64_t capacity);
  bool BeginChunk();
  // Decodes one record; returns true if it wrote a row into *row.
  bool Step(NvtxrRow* row);
  void Damage() {
    stats.damaged_chunks++;
    in_chunk = false;
  }
  void Finish();
};

void SetError(char* err, uint32_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  size_t n = std::min<size_t>(message.size(), err_len - 1);
  memcpy(err, message.data(), n);
  err[n] = 0;
}

// pread until n bytes or EOF/error; returns bytes read, -1 on error (errno set).
int64_t ReadFully(int fd, uint8_t* dst, uint64_t n, uint64_t off) {
  uint64_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, dst + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return got ? static_cast<int64_t>(got) : -1;
    if (r == 0) break;
    got += static_cast<uint64_t>(r);
  }
  return static_cast<int64_t>(got);
}

uint64_t Context::ReadChunk(const ChunkRef& c) {
  if (buf.size() < c.available) buf.resize(c.available);
  int64_t got = ReadFully(fd, buf.data(), c.available, c.offset);
  return got < 0 ? 0 : static_cast<uint64_t>(got);
}

int Context::Open(const char* path, char* err, uint32_t err_len) {
  ResetSegment();
  phase = kIdle;
  fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    stats.unreadable_segments++;
    SetError(err, err_len, std::string("cannot open ") + path + ": " + strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ResetSegment();
    stats.unreadable_segments++;
    SetError(err, err_len, std::string("not a regular file: ") + path);
    return -1;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  file_size = size;
  if (size < kHeaderFieldsEnd) {
    ResetSegment();
    stats.damaged_segments++;
    SetError(err, err_len, std::string("segment header truncated: ") + path);
    return -2;
  }
  uint8_t h[kHeaderV2End] = {};
  int64_t got = ReadFully(fd, h, std::min<uint64_t>(size, kHeaderV2End), 0);
  if (got < static_cast<int64_t>(kHeaderFieldsEnd)) {
    int e = errno;
    ResetSegment();
    stats.unreadable_segments++;
    SetError(err, err_len, std::string("cannot read ") + path + ": " + (got < 0 ? strerror(e) : "short read"));
    return -1;
  }
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
  bool v2 = hsize >= kHeaderV2End;
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
  uint64_t chunk_count = v2 ? Load64(h + kOffChunkCount) : 0;
  uint64_t dropped = v2 ? Load64(h + kOffDropped) : 0;
  uint64_t process_start = v2 ? Load64(h + kOffProcessStart) : 0;
  int64_t parent_pid = v2 ? static_cast<int64_t>(Load64(h + kOffParentPid)) : 0;
  uint64_t parent_start = v2 ? Load64(h + kOffParentStart) : 0;
  uint32_t inherited = v2 ? Load32(h + kOffInherited) : 0;
  segment_no++;

  // The process this segment belongs to (older writers: every segment on its own).
  std::pair<int64_t, uint64_t> key(info.pid, process_start ? process_start : ~segment_no);
  auto pit = proc_index.find(key);
  if (pit == proc_index.end()) {
    procs.emplace_back();
    ProcState& ps = procs.back();
    ps.pid = info.pid;
    if (parent_pid != 0 && parent_start != 0) {
      auto par = proc_index.find(std::make_pair(parent_pid, parent_start));
      if (par != proc_index.end()) {
        ps.parent = par->second;
        ps.inherited = inherited;
      }
    }
    pit = proc_index.emplace(key, static_cast<int>(procs.size() - 1)).first;
  }
  proc = &procs[static_cast<size_t>(pit->second)];

  stats.dropped_events += dropped;
  uint64_t body = size - hsize;
  if (chunk_count && body < chunk_count * uint64_t(csize)) {
    stats.truncated_segments++;
    stats.missing_chunks += chunk_count - body / csize;
  }
  try {
    Scan(h, size, hsize, csize);
    PrescanDefinitions();
  } catch (...) {
    ResetSegment();
    stats.unreadable_segments++;
    SetError(err, err_len, std::string("out of memory reading ") + path);
    return -1;
  }
  stats.segments++;
  phase = kRecords;
  return 0;
}

void Context::Scan(const uint8_t*, uint64_t size, uint32_t hsize, uint32_t csize) {
  uint64_t body = size - hsize;
  uint64_t count = (body + csize - 1) / csize;
  info.chunk_count = static_cast<uint32_t>(std::min<uint64_t>(count, UINT32_MAX));
  std::vector<ChunkRef> file_order;
  for (uint64_t k = 0; k < count; ++k) {
    uint64_t off = hsize + k * csize;
    uint64_t avail = std::min<uint64_t>(csize, size - off);
    uint8_t ch[kChunkHeaderSize] = {};
    int64_t got = ReadFully(fd, ch, std::min<uint64_t>(avail, kChunkHeaderSize), off);
    if (got < 0) {
      stats.damaged_chunks++;
      continue;
    }
    if (static_cast<uint64_t>(got) < kChunkHeaderSize) {
      bool zero = true;
      for (int64_t i = 0; i < got; ++i) zero = zero && ch[i] == 0;
      if (zero) stats.unpublished_chunks++;
      else stats.damaged_chunks++;
      continue;
    }
    uint32_t magic = Load32(ch);
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
    ref.thread_index = Load32(ch + 4);
    ref.tid = static_cast<int64_t>(Load64(ch + 8));
    ref.seq = Load64(ch + 16);
    uint64_t serial = Load64(ch + 24);
    // Older writers: the thread index, valid within this segment only.
    ref.thread_key = serial ? serial : ((uint64_t(1) << 47) | (segment_no << 24) | ref.thread_index);
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
}

// First pass: every string and domain definition of the segment, so that no name
// depends on which thread's chunk is decoded first (a registered string or a domain
// is defined only in the stream of the thread that registered or created it).
void Context::PrescanDefinitions() {
  std::vector<std::pair<uint32_t, uint32_t>> creates;  // (local domain, name id)
  for (const ChunkRef& c : order) {
    uint64_t n = ReadChunk(c);
    uint64_t p = kChunkHeaderSize;
    while (p + 8 <= n) {
      const uint8_t* r = buf.data() + p;
      uint64_t w0 = Load64(r);
      if (w0 == 0) break;
      uint64_t len = RecordLength(r, n - p);
      if (len == 0) break;  // damage: counted by the second pass
      uint8_t kind = static_cast<uint8_t>(w0 & 0xff);
      uint32_t msg = static_cast<uint32_t>(w0 >> 32);
      if (kind == kStringDef) {
        uint32_t tl = Load32(r + 8);
        DefineString(proc, msg, Intern(std::string_view(reinterpret_cast<const char*>(r + 16), tl)));
      } else if (kind == kDomainCreate) {
        creates.emplace_back(static_cast<uint32_t>((w0 >> 16) & 0xffff), msg);
      }
      p += len;
    }
  }
  for (const auto& cr : creates) {
    uint32_t name = 0;
    if (cr.first == 0 || !LookupString(cr.second, &name)) continue;
    NvtxrDomain& d = domains[Domain(cr.first)];
    if (d.name < 0) d.name = static_cast<int32_t>(name);
  }
}

bool Context::BeginChunk() {
  if (next_chunk >= order.size()) return false;
  chunk = &order[next_chunk++];
  uint64_t n = ReadChunk(*chunk);
  pos = kChunkHeaderSize;
  end = n;
  in_chunk = true;
  stats.chunks++;
  return true;
}

bool Context::Step(NvtxrRow* row) {
  if (pos + 8 > end) {
    // Chunk exhausted without a zero word: fine when the chunk is complete, damage when
    // the file was cut inside it (or could not be read).
    if (end < info.chunk_size) stats.damaged_chunks++;
    in_chunk = false;
    return false;
  }
  const uint8_t* p = buf.data() + pos;
  uint64_t w0 = Load64(p);
  if (w0 == 0) {
    in_chunk = false;
    return false;
  }
  uint64_t remaining = end - pos;
  uint64_t len = RecordLength(p, remaining);
  if (len == 0) {
    Damage();
    return false;
  }
  uint8_t kind = static_cast<uint8_t>(w0 & 0xff);
  uint8_t flags = static_cast<uint8_t>((w0 >> 8) & 0xff);
  uint32_t local_domain = static_cast<uint32_t>((w0 >> 16) & 0xffff);
  uint32_t msg = static_cast<uint32_t>(w0 >> 32);
  pos += len;
  stats.records++;

  if (kind >= kRangePush && kind <= kMark) {
    uint8_t payload_type = (flags & kPayloadMask) >> kPayloadShift;
    bool has_range_id = kind == kRangeStart || kind == kRangeEnd;
    bool has_attrs = (flags & (kFlagColor | kFlagCategory)) != 0;
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
    stats.events++;
    int64_t tid = chunk->tid;
    uint64_t stack_key = (chunk->thread_key << 16) | local_domain;

    if (kind == kRangePop) {
      auto it = proc->stacks.find(stack_key);
      if (it == proc->stacks.end() || it->second.empty()) {
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
      auto it = proc->open_starts.find(range_id);
      if (it == proc->open_starts.end()) {
        proc->early_ends[range_id] = EarlyEnd{ts, tid};
        return false;
      }
      *row = it->second;
      proc->open_starts.erase(it);
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
      stats.unknown_strings++;
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
      auto& stack = proc->stacks[stack_key];
      r.depth = static_cast<int32_t>(stack.size());
      r.end_ns = -1;
      stack.push_back(r);
      return false;
    }
    // kRangeStart
    r.kind = kNvtxrStartEnd;
    auto early = proc->early_ends.find(range_id);
    if (early != proc->early_ends.end()) {
      r.end_ns = early->second.ts;
      r.end_tid = early->second.tid;
      proc->early_ends.erase(early);
      *row = r;
      stats.rows++;
      return true;
    }
    r.end_ns = -1;
    auto ins = proc->open_starts.emplace(range_id, r);
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
    case kStringDef:  // collected by PrescanDefinitions
      return false;
    case kDomainCreate: {
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
          proc->local_domains[local_domain] = global;
        }
        NvtxrDomain& dd = domains[global];
        if (dd.create_ns == 0 || static_cast<uint64_t>(ts) < dd.create_ns) dd.create_ns = ts;
        if (named) dd.name = static_cast<int32_t>(name);
      }
      return false;
    }
    case kDomainDestroy:
      return false;
    case kCategoryName: {
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
      return false;
    }
    case kThreadName: {
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
      return false;
    }
    default:
      break;
  }
  Damage();
  return false;
}

void Context::Finish() {
  ResetSegment();
  pending.clear();
  pending_pos = 0;
  for (ProcState& ps : procs) {
    for (auto& kv : ps.stacks) {
      for (NvtxrRow r : kv.second) {
        r.flags |= kNvtxrUnclosed;
        r.end_ns = -1;
        pending.push_back(r);
      }
    }
    for (auto& kv : ps.open_starts) {
      NvtxrRow r = kv.second;
      r.flags |= kNvtxrUnclosed;
      r.end_ns = -1;
      pending.push_back(r);
    }
    stats.unmatched_ends += ps.early_ends.size();
    ps.stacks.clear();
    ps.open_starts.clear();
    ps.early_ends.clear();
  }
  std::sort(pending.begin(), pending.end(),
            [](const NvtxrRow& a, const NvtxrRow& b) { return a.start_ns < b.start_ns; });
  stats.unclosed += pending.size();
  stats.rows += pending.size();
  phase = kFlush;
}

int64_t Context::Next(NvtxrRow* rows, int64_t capacity) {
  int64_t n = 0;
  while (n < capacity) {
    if (phase == kRecords) {
      if (!in_chunk) {
        if (!BeginChunk()) {
          phase = kDone;
          break;
        }
      }
      if (Step(&rows[n])) ++n;
    } else if (phase == kFlush) {
      if (pending_pos >= pending.size()) {
        pending.clear();
        pending.shrink_to_fit();
        pending_pos = 0;
        phase = kIdle;
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
  if (c->phase != kRecords && c->phase != kDone) return -1;
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

NVTXR_API void nvtxr_finish(void* ctx) {
  if (!ctx) return;
  try {
    static_cast<Context*>(ctx)->Finish();
  } catch (...) {
  }
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
