// Segment files and chunks: opening a segment, claiming and prefaulting chunks, the
// slow path of Reserve, drop counting. See segment_writer.h.
#include "recorder/segment_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "recorder/config.h"
#include "recorder/os_util.h"
#include "recorder/registry.h"
#include "recorder/string_ids.h"
#include "recorder/string_table.h"

namespace nvtx_recorder {

using namespace nvtx_record;

std::atomic<uint32_t> g_epoch{1};
uint32_t g_chunk_size = kDefaultChunkSize;

namespace {

struct Segment {
  int fd = -1;
  uint32_t epoch = 0;  // epoch this segment belongs to (0: none open)
  uint64_t next_chunk = 0;
  uint64_t file_size = 0;
  uint32_t next_thread_index = 0;
  bool need_globals = false;        // registry definitions not yet written into it
  SegmentHeader* header = nullptr;  // shared mapping of the header page (or null)
};

// Everything below is guarded by RecorderMutex().
Segment g_seg;
std::atomic<uint32_t> g_failed_epoch{0};  // epoch whose segment could not be opened
// Process identity written into every segment header (see record_format.h).
uint64_t g_process_start_ns = 0;
int64_t g_parent_pid = 0;
uint64_t g_parent_process_start_ns = 0;
uint32_t g_inherited_ids = 0;
// Drop counting: the last opened segment's SegmentHeader::dropped_events (a shared mapping
// that is never unmapped, so a thread racing a segment switch still writes valid
// memory; it stays the slot after the segment is closed, until the next one's header
// replaces it), or g_pending_drops while no segment was opened yet or a header is being
// replaced (carried into the next one; when the next one cannot be opened, into the last
// one's: CountDropsInLastSegmentLocked).
// g_drop_writers: CountDrop calls that may hold the slot; the header page is mapped anew
// only once the slot is cleared and they are done (QuiesceDropSlotLocked), so a drop is
// counted in the segment it was dropped from, never into the page as it is replaced.
std::atomic<uint64_t*> g_drop_slot{nullptr};
std::atomic<int> g_drop_writers{0};
std::atomic<uint64_t> g_pending_drops{0};
std::atomic<uint64_t> g_dropped_total{0};
// A new epoch's drops before its segment opens are counted in the last segment's header (the
// slot stays until the next header replaces it); when the new segment opens, those counted
// there since the epoch began (above g_epoch_base_drops) move into it: every drop in the
// segment of the window it happened in. g_carry_drops: the last header may hold such drops.
uint64_t g_epoch_base_drops = 0;
bool g_carry_drops = false;

// The next epoch (never 0: a thread state's epoch 0 means "none yet").
void BumpEpoch() {
  uint32_t e = g_epoch.load(std::memory_order_relaxed) + 1;
  if (e == 0) e = 1;
  g_epoch.store(e, std::memory_order_release);
}

// Recording into the segment of `epoch` is impossible (no file, disk full, ...): every
// thread drops its events (counted) until the next epoch.
bool FailEpoch(uint32_t epoch) {
  g_failed_epoch.store(epoch, std::memory_order_relaxed);
  return false;
}

// The current segment's header page is mapped at one address for the whole process,
// each new segment's header mapped over the previous one (MAP_FIXED replaces it in one
// step): a thread racing a segment switch still writes valid memory when it counts a
// drop (into the old segment's header or the new one's), and the process holds one
// such mapping however many segments it opens (before: one leaked 4 KiB mapping per
// segment, each keeping its file's disk space after the file was deleted).
uint8_t* g_header_page = nullptr;  // under RecorderMutex(); never unmapped
bool g_header_is_file = false;     // g_header_page maps a segment of this process

// No CountDrop holds the header page's slot any more (its writers are few and brief: a
// drop; seq_cst pairs with CountDrop's increment and load, store then load on each side).
void QuiesceDropSlotLocked() {
  g_drop_slot.store(nullptr, std::memory_order_seq_cst);
  while (g_drop_writers.load(std::memory_order_seq_cst) != 0) sched_yield();
}

SegmentHeader* MapHeaderLocked(int fd) {
  QuiesceDropSlotLocked();
  if (g_carry_drops && g_header_page && g_header_is_file) {
    // (no CountDrop holds the slot: the drops of this epoch counted in the last segment's
    // header move out of it, pending for the new one)
    uint64_t* old = &reinterpret_cast<SegmentHeader*>(g_header_page)->dropped_events;
    const uint64_t now = __atomic_load_n(old, __ATOMIC_RELAXED);
    if (now > g_epoch_base_drops) {
      g_pending_drops.fetch_add(now - g_epoch_base_drops, std::memory_order_relaxed);
      __atomic_store_n(old, g_epoch_base_drops, __ATOMIC_RELAXED);
    }
  }
  g_carry_drops = false;
  void* want = g_header_page;
  const int fixed = want ? MAP_FIXED : 0;
  void* m = mmap(want, kSegmentHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED | fixed, fd, 0);
  if (m == MAP_FAILED) {
    g_header_is_file = false;  // (MAP_FIXED may have unmapped the previous header)
    return nullptr;
  }
  g_header_page = static_cast<uint8_t*>(m);
  g_header_is_file = true;
  return static_cast<SegmentHeader*>(m);
}

// No file behind the header page any more (a forked child's inherited mapping of its
// parent's file): anonymous memory in its place, at the same address.
void DetachHeaderLocked() {
  if (!g_header_page) return;
  QuiesceDropSlotLocked();
  g_header_is_file = false;
  void* m =
      mmap(g_header_page, kSegmentHeaderSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (m == MAP_FAILED) {  // keep the address reserved at least
    munmap(g_header_page, kSegmentHeaderSize);
    g_header_page = nullptr;
  }
}

// Drops are counted into `slot` from now on, and those pending are moved into it: the slot
// is published first, then every CountDrop that read no slot is let finish (its drop is
// pending), and only then do the pending ones move; a CountDrop after the publication sees
// the slot (seq_cst on both sides). (Moving them before publishing lost the drops counted
// as pending in between: the stress test's signal handlers found 10 of 9605 missing.)
void PublishDropSlotLocked(uint64_t* slot) {
  g_drop_slot.store(slot, std::memory_order_seq_cst);
  while (g_drop_writers.load(std::memory_order_seq_cst) != 0) sched_yield();
  uint64_t pending = g_pending_drops.exchange(0, std::memory_order_relaxed);
  if (pending) __atomic_fetch_add(slot, pending, __ATOMIC_RELAXED);
}

// The header page stays mapped, and drops counted into it, until the next segment's header
// replaces it (MapHeaderLocked): a drop between a new epoch's start and its segment's
// opening, which waits for the next write, is counted in the last segment. (Clearing the slot
// here made such drops pending for a segment that, with nothing written after, never opened:
// lost, 4 of 2710 signal-handler events in the stress test under ASan.)
void CloseSegmentLocked() {
  // (done with it: closed, then its lock released with its file descriptor)
  if (g_seg.header) __atomic_or_fetch(&g_seg.header->flags, kSegmentClosed, __ATOMIC_RELEASE);
  if (g_seg.fd >= 0) close(g_seg.fd);
  g_seg = Segment();
}

// No new segment could be opened (full disk, ...): the drops pending for it, and those to
// come until one is, are counted in the header of the process's last segment, where the
// reader finds them (none in a forked child before its own: they stay pending).
void CountDropsInLastSegmentLocked() {
  g_carry_drops = false;  // (they stay there)
  if (!g_header_page || !g_header_is_file) return;
  PublishDropSlotLocked(&reinterpret_cast<SegmentHeader*>(g_header_page)->dropped_events);
}

// The header of a new segment of this process, opened now.
void FillSegmentHeader(SegmentHeader* h) {
  memcpy(h->magic, kSegmentMagic, sizeof(h->magic));
  h->version = kFormatVersion;
  h->header_size = kSegmentHeaderSize;
  h->chunk_size = g_chunk_size;
  h->pid = getpid();
  h->ppid = getppid();
  struct timespec rt;
  h->start_ns = NowNs();
  clock_gettime(CLOCK_REALTIME, &rt);
  h->start_realtime_ns = uint64_t(rt.tv_sec) * 1000000000ull + uint64_t(rt.tv_nsec);
  ReadProcLine("/proc/self/comm", h->process_name, sizeof(h->process_name));
  size_t n = ReadProcFile("/proc/self/cmdline", h->cmdline, sizeof(h->cmdline));
  while (n > 0 && h->cmdline[n - 1] == 0) --n;
  for (size_t i = 0; i < n; ++i) {
    if (h->cmdline[i] == 0) h->cmdline[i] = ' ';
  }
  h->cmdline[n] = 0;
  // (the header is zeroed; a name longer than the field is cut, still NUL-terminated)
  gethostname(h->host_name, sizeof(h->host_name) - 1);
  if (g_process_start_ns == 0) g_process_start_ns = h->start_ns;
  h->process_start_ns = g_process_start_ns;
  h->parent_pid = g_parent_pid;
  h->parent_process_start_ns = g_parent_process_start_ns;
  h->inherited_string_ids = g_inherited_ids;
}

// Creates <dir>/<pid>-<start_ns>.nvtxseg (0600: it holds the command line) as `path`;
// start_ns is moved forward when the name is taken. -1 on failure.
int CreateSegmentFile(const char* dir, SegmentHeader* h, char (&path)[PATH_MAX]) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int len = snprintf(path, sizeof(path), "%s/%lld-%llu%s", dir, (long long)h->pid,
                       (unsigned long long)(h->start_ns + attempt), kSegmentSuffix);
    if (len <= 0 || len >= int(sizeof(path))) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      h->start_ns += attempt;
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

bool OpenSegmentLocked(uint32_t epoch) {
  CloseSegmentLocked();
  const char* dir = OutputDirLocked();
  if (!dir) return false;
  // (static, under the mutex: no malloc on the way to an event's record)
  alignas(8) static uint8_t buf[kSegmentHeaderSize];
  memset(buf, 0, sizeof(buf));
  SegmentHeader* h = reinterpret_cast<SegmentHeader*>(buf);
  FillSegmentHeader(h);
  if (!FileLimitAllows(kSegmentHeaderSize)) return false;
  static char path[PATH_MAX];
  ScopedFd fd(CreateSegmentFile(dir, h, path));
  if (fd.get() < 0) return false;
  // The segment's lock, held while it is written (record_format.h, kSegmentLocked): an OFD
  // lock belongs to this open file description, closed with the segment or the process
  // (a forked child closes its copy: SegmentWriterAfterForkInChild).
  struct flock lock = {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  if (fcntl(fd.get(), F_OFD_SETLK, &lock) == 0) h->flags |= kSegmentLocked;
  if (!PwriteAll(fd.get(), buf, kSegmentHeaderSize, 0)) {
    unlink(path);  // (full disk: no half-made segment left behind)
    return false;
  }
  g_seg.fd = fd.release();
  g_seg.epoch = epoch;
  g_seg.file_size = kSegmentHeaderSize;
  g_seg.need_globals = true;
  // The header page is backed (written above): stores into it cannot fault.
  if (SegmentHeader* m = MapHeaderLocked(g_seg.fd)) {
    g_seg.header = m;
    PublishDropSlotLocked(&g_seg.header->dropped_events);
  }
  return true;
}

// Abandons the thread's chunk (no further writes into it) and prepares it for the
// segment of `epoch`.
void SwitchLocked(ThreadState* ts, uint32_t epoch) {
  SealAndUnmapChunk(ts);
  ts->chunk = nullptr;
  ts->pos = 0;
  ts->limit = 0;
  ts->chunk_end = 0;
  ts->epoch = epoch;
  ts->gen++;
  ts->in_segment = 0;
  ts->seq = 0;
  ts->tid = GetTid();  // differs in a forked child
  ClearStringCache(ts);
}

// Makes the next window of the chunk usable by the fast path. The window's file range
// is first written with zeros (pwrite): that puts it in the page cache in large folios,
// far cheaper than faulting the hole in page by page through the mapping (measure with
// benchmarks/bench_recorder_native.py), and it reserves the disk space, so a full disk
// shows up here as an error instead of a SIGBUS on a store into the mapping. Nothing
// has been written at or beyond ts->limit, so the zeros never cover records. Takes the
// mutex: the fd must still be this chunk's segment. False when nothing could be added
// (the rest of the chunk is then given up).
bool Prefault(ThreadState* ts) {
  uint32_t start = ts->limit;
  uint32_t window = ts->window < kFirstWindow ? kFirstWindow : ts->window;
  if (window > kPopulateWindow) window = kPopulateWindow;
  uint32_t end = start + window;
  if (end > ts->chunk_end) end = ts->chunk_end;
  if (end <= start) return false;
  size_t want = end - start;
  size_t done = want;
  {
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    if (g_seg.fd >= 0 && g_seg.epoch == ts->epoch) {
      static const char kZeros[kPopulateWindow] = {};
      uint64_t off = ts->chunk_offset + start;
      while (want > 0 && !FileLimitAllows(off + want)) want = want > 4096 ? (want - 1) & ~size_t(4095) : 0;
      done = 0;
      while (done < want) {
        ssize_t w = pwrite(g_seg.fd, kZeros + done, want - done, off_t(off + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;  // e.g. disk full
        done += size_t(w);
      }
      if (done < want) done &= ~size_t(4095);
    }
    // else: the segment was switched; the thread moves on at its next record.
  }
  if (done == 0) {
    ts->chunk_end = ts->limit;  // never store past what is backed
    return false;
  }
  ts->limit = start + uint32_t(done);
  if (window < kPopulateWindow) ts->window = window * 2;
  return true;
}

void WriteOwnThreadNameLocked(ThreadState* ts) {
  char path[64];
  char name[64];
  snprintf(path, sizeof(path), "/proc/self/task/%lld/comm", (long long)ts->tid);
  size_t n = ReadProcLine(path, name, sizeof(name));
  WriteThreadNameRecord(ts, ts->tid, name, n, /*override_name=*/false);
}

bool ClaimChunkLocked(ThreadState* ts) {
  uint32_t cur = ts->epoch;
  if (g_seg.epoch != cur && !OpenSegmentLocked(cur)) {
    CountDropsInLastSegmentLocked();
    return FailEpoch(cur);
  }
  uint64_t cs = g_chunk_size;
  uint64_t off = kSegmentHeaderSize + g_seg.next_chunk * cs;
  if (off + cs > g_seg.file_size) {
    if (!FileLimitAllows(off + cs) || ftruncate(g_seg.fd, off_t(off + cs)) != 0) {
      return FailEpoch(cur);  // stop cleanly; drops are counted
    }
    g_seg.file_size = off + cs;
  }
  void* m = mmap(nullptr, cs, PROT_READ | PROT_WRITE, MAP_SHARED, g_seg.fd, off_t(off));
  if (m == MAP_FAILED) return FailEpoch(cur);  // e.g. ulimit -v: stop cleanly, drops are counted
  g_seg.next_chunk++;
  SealAndUnmapChunk(ts);  // memory bound: only the current chunk
  bool first = !ts->in_segment;
  if (first) {
    ts->in_segment = 1;
    ts->seg_thread_index = g_seg.next_thread_index++;
    ts->seq = 0;
  }
  // No readahead: the chunk's pages are holes, faulted in window by window below.
  madvise(m, cs, MADV_RANDOM);
  ts->chunk = static_cast<uint8_t*>(m);
  ts->chunk_offset = off;
  ts->pos = kChunkHeaderSize;
  ts->clock_end = 0;  // the chunk's first event in full form: it sets the chunk's clock
  ts->chunk_end = uint32_t(cs);
  ts->limit = 0;
  ts->window = kFirstWindow;
  if (!Prefault(ts) || ts->limit < 4096) {
    // Cannot back even the first page (disk full?): stop recording into this segment
    // rather than risk a SIGBUS. The chunk stays unpublished (magic 0).
    munmap(m, cs);
    ts->chunk = nullptr;
    ts->pos = ts->limit = ts->chunk_end = 0;
    return FailEpoch(cur);
  }
  ChunkHeader* h = static_cast<ChunkHeader*>(m);
  h->thread_index = ts->seg_thread_index;
  h->tid = ts->tid;
  h->seq = ts->seq++;
  h->thread_serial = ts->serial + 1;
  __atomic_store_n(&h->magic, kChunkMagic, __ATOMIC_RELEASE);
  // Readers tell a truncated file from a short one by this count.
  if (g_seg.header) __atomic_store_n(&g_seg.header->chunk_count, g_seg.next_chunk, __ATOMIC_RELEASE);
  if (first) WriteOwnThreadNameLocked(ts);
  if (g_seg.need_globals) {
    g_seg.need_globals = false;
    EmitRegistryLocked(ts);
  }
  return true;
}

}  // namespace

void SealAndUnmapChunk(ThreadState* ts) {
  if (!ts->chunk) return;
  ChunkHeader* h = reinterpret_cast<ChunkHeader*>(ts->chunk);
  uint64_t end = ts->pos < kChunkHeaderSize ? kChunkHeaderSize : ts->pos;
  ChunkSums(ts->chunk, end, &h->sum1, &h->sum2);
  __atomic_store_n(&h->sealed_end, end, __ATOMIC_RELEASE);
  UnmapChunk(ts);
}

void UnmapChunk(ThreadState* ts) {
  if (!ts->chunk) return;
  munmap(ts->chunk, g_chunk_size);
  ts->chunk = nullptr;
}

uint8_t* ReserveSlow(ThreadState* ts, uint32_t n) {
  if (n > g_chunk_size - kChunkHeaderSize) return nullptr;
  ErrnoGuard keep_errno;
  uint32_t cur = g_epoch.load(std::memory_order_acquire);
  // Same segment, room left in the chunk: only the prefaulted window is exhausted.
  while (ts->epoch == cur && ts->chunk && ts->limit < ts->chunk_end && ts->pos + n <= ts->chunk_end) {
    if (!Prefault(ts)) break;
    if (ts->pos + n <= ts->limit) return ts->chunk + ts->pos;
  }
  if (g_failed_epoch.load(std::memory_order_relaxed) == cur) return nullptr;
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  for (int attempt = 0; attempt < 4; ++attempt) {
    cur = g_epoch.load(std::memory_order_relaxed);
    if (ts->epoch != cur) SwitchLocked(ts, cur);
    while (ts->chunk && ts->limit < ts->chunk_end && ts->pos + n > ts->limit) {
      if (!Prefault(ts)) break;
    }
    if (ts->chunk && ts->pos + n <= ts->limit) return ts->chunk + ts->pos;
    if (g_failed_epoch.load(std::memory_order_relaxed) == cur) return nullptr;
    if (!ClaimChunkLocked(ts)) return nullptr;
  }
  return nullptr;
}

void StartNewEpochLocked() {
  CloseSegmentLocked();
  g_failed_epoch.store(0, std::memory_order_relaxed);
  // (the count the last segment's header holds now is its own; what it gains until the new
  // epoch's segment opens is the new epoch's: MapHeaderLocked moves it)
  g_carry_drops = g_header_page && g_header_is_file;
  if (g_carry_drops) {
    g_epoch_base_drops =
        __atomic_load_n(&reinterpret_cast<SegmentHeader*>(g_header_page)->dropped_events, __ATOMIC_RELAXED);
  }
  BumpEpoch();
}

void HoldWindowDropsLocked() {
  const uint32_t cur = g_epoch.load(std::memory_order_relaxed);
  if (g_seg.epoch == cur || g_failed_epoch.load(std::memory_order_relaxed) == cur) return;
  bool dropped = g_pending_drops.load(std::memory_order_relaxed) != 0;
  if (g_carry_drops && g_header_page && g_header_is_file) {
    dropped = dropped || __atomic_load_n(&reinterpret_cast<SegmentHeader*>(g_header_page)->dropped_events,
                                         __ATOMIC_RELAXED) > g_epoch_base_drops;
  }
  if (dropped && !OpenSegmentLocked(cur)) CountDropsInLastSegmentLocked();
}

void SegmentWriterAfterForkInChild() {
  // The inherited header mapping is the parent's file: never count into it.
  g_drop_slot.store(nullptr, std::memory_order_relaxed);
  g_drop_writers.store(0, std::memory_order_relaxed);  // (a thread of the parent's may have been counting)
  g_pending_drops.store(0, std::memory_order_relaxed);
  g_dropped_total.store(0, std::memory_order_relaxed);
  g_carry_drops = false;
  DetachHeaderLocked();
  if (g_seg.fd >= 0) close(g_seg.fd);
  g_seg = Segment();
  g_parent_pid = g_process_start_ns ? int64_t(getppid()) : 0;
  g_parent_process_start_ns = g_process_start_ns;
  g_inherited_ids = g_process_start_ns ? InheritedStringIds() : 0;
  g_process_start_ns = 0;
  StartNewEpochLocked();
}

void CountDrop() {
  g_dropped_total.fetch_add(1, std::memory_order_relaxed);
  g_drop_writers.fetch_add(1, std::memory_order_seq_cst);
  uint64_t* slot = g_drop_slot.load(std::memory_order_seq_cst);
  if (slot) {
    __atomic_fetch_add(slot, 1, __ATOMIC_RELAXED);
  } else {
    g_pending_drops.fetch_add(1, std::memory_order_relaxed);
  }
  g_drop_writers.fetch_sub(1, std::memory_order_release);
}

uint64_t DroppedCount() { return g_dropped_total.load(std::memory_order_relaxed); }

namespace {

// At exit() (after the atexit handlers; not at a SIGKILL, _exit or a crash): the segment in
// use is closed (kSegmentClosed). No lock: the header page is never unmapped; a forked
// child's is anonymous memory (g_header_is_file false).
__attribute__((destructor)) void CloseSegmentAtExit() {
  if (g_header_page && g_header_is_file && g_seg.fd >= 0) {
    __atomic_or_fetch(&reinterpret_cast<SegmentHeader*>(g_header_page)->flags, kSegmentClosed, __ATOMIC_RELEASE);
  }
}

}  // namespace

}  // namespace nvtx_recorder
