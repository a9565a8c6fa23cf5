#include "recorder/segment_writer.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

#include "recorder/registry.h"
#include "recorder/string_table.h"

namespace nvtx_recorder {

using namespace nvtx_record;

std::atomic<uint32_t> g_epoch{1};
uint32_t g_chunk_size = kDefaultChunkSize;
std::atomic<uint32_t> g_next_string_id{1};
__thread ThreadState* t_state = nullptr;

namespace {

__thread bool t_dead = false;  // set once this thread's state was torn down

struct Segment {
  int fd = -1;
  uint32_t epoch = 0;  // epoch this segment belongs to (0: none open)
  uint64_t next_chunk = 0;
  uint64_t file_size = 0;
  uint32_t next_thread_index = 0;
  bool need_globals = false;  // registry definitions not yet written into it
  SegmentHeader* header = nullptr;  // shared mapping of the header page (or null)
};

// Everything below is guarded by RecorderMutex().
Segment g_seg;
char* g_dir = nullptr;             // leaked on change: OutputDir() pointers stay valid
bool g_chunk_size_set = false;
ThreadState* g_threads = nullptr;  // live thread states
uint64_t g_retired_events = 0;     // events of exited threads
uint64_t g_thread_serial = 0;
bool g_runtime_ready = false;
pthread_key_t g_exit_key;
std::atomic<uint32_t> g_failed_epoch{0};  // epoch whose segment could not be opened
// Process identity written into every segment header (see record_format.h).
uint64_t g_process_start_ns = 0;
int64_t g_parent_pid = 0;
uint64_t g_parent_process_start_ns = 0;
uint32_t g_inherited_ids = 0;
// Drop counting: the current segment's SegmentHeader::dropped_events (a shared mapping
// that is never unmapped, so a thread racing a segment switch still writes valid
// memory), or g_pending_drops while no segment is open (carried into the next one).
std::atomic<uint64_t*> g_drop_slot{nullptr};
std::atomic<uint64_t> g_pending_drops{0};
std::atomic<uint64_t> g_dropped_total{0};

// RLIMIT_FSIZE: a write or truncate past it raises SIGXFSZ, whose default action kills
// the process. The recorder never goes past it: true when the file may extend to `end`.
bool FileLimitAllows(uint64_t end) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return true;
  return end <= uint64_t(rl.rlim_cur);
}

int64_t GetTid() { return static_cast<int64_t>(syscall(SYS_gettid)); }

void InitChunkSizeLocked() {
  if (g_chunk_size_set) return;
  g_chunk_size_set = true;
  const char* env = getenv("NVTX_TF_CHUNK_SIZE");
  if (!env || !*env) return;
  char* end = nullptr;
  unsigned long long v = strtoull(env, &end, 0);
  if (end == env) return;
  if (v < 8192) v = 8192;
  if (v > (1ull << 30)) v = 1ull << 30;
  v = (v + 4095) & ~4095ull;
  g_chunk_size = static_cast<uint32_t>(v);
}

// mkdir -p; 0 or -1 with errno.
int MakeDirs(const char* path) {
  size_t n = strlen(path);
  if (n == 0 || n >= PATH_MAX) {
    errno = n ? ENAMETOOLONG : ENOENT;
    return -1;
  }
  char buf[PATH_MAX];
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;  // recordings hold command lines
      buf[i] = c;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  if (access(path, W_OK | X_OK) != 0) return -1;
  return 0;
}

// Reads a small /proc file into buf (NUL-terminated); returns bytes read.
size_t ReadProcFile(const char* path, char* buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    buf[0] = 0;
    return 0;
  }
  size_t got = 0;
  while (got + 1 < cap) {
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  close(fd);
  buf[got] = 0;
  return got;
}

void CloseSegmentLocked() {
  g_drop_slot.store(nullptr, std::memory_order_release);
  if (g_seg.fd >= 0) close(g_seg.fd);
  // g_seg.header stays mapped (4 KiB, leaked): a thread may still count a drop into it.
  g_seg = Segment();
}

bool OpenSegmentLocked(uint32_t epoch) {
  CloseSegmentLocked();
  if (!g_dir) return false;
  SegmentHeader* h = static_cast<SegmentHeader*>(calloc(1, kSegmentHeaderSize));
  if (!h) return false;
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
  size_t n = ReadProcFile("/proc/self/comm", h->process_name, sizeof(h->process_name));
  while (n > 0 && h->process_name[n - 1] == '\n') h->process_name[--n] = 0;
  n = ReadProcFile("/proc/self/cmdline", h->cmdline, sizeof(h->cmdline));
  while (n > 0 && h->cmdline[n - 1] == 0) --n;
  for (size_t i = 0; i < n; ++i) {
    if (h->cmdline[i] == 0) h->cmdline[i] = ' ';
  }
  h->cmdline[n] = 0;
  if (g_process_start_ns == 0) g_process_start_ns = h->start_ns;
  h->process_start_ns = g_process_start_ns;
  h->parent_pid = g_parent_pid;
  h->parent_process_start_ns = g_parent_process_start_ns;
  h->inherited_string_ids = g_inherited_ids;
  if (!FileLimitAllows(kSegmentHeaderSize)) {
    free(h);
    return false;
  }

  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    char path[PATH_MAX];
    int len = snprintf(path, sizeof(path), "%s/%lld-%llu%s", g_dir, (long long)h->pid,
                       (unsigned long long)(h->start_ns + attempt), kSegmentSuffix);
    if (len <= 0 || len >= int(sizeof(path))) break;
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);  // holds the command line
    if (fd < 0 && errno != EEXIST) break;
    if (fd >= 0) h->start_ns += attempt;
  }
  if (fd < 0) {
    free(h);
    return false;
  }
  size_t off = 0;
  const char* src = reinterpret_cast<const char*>(h);
  while (off < kSegmentHeaderSize) {
    ssize_t w = pwrite(fd, src + off, kSegmentHeaderSize - off, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      free(h);
      close(fd);
      return false;
    }
    off += size_t(w);
  }
  free(h);
  g_seg.fd = fd;
  g_seg.epoch = epoch;
  g_seg.file_size = kSegmentHeaderSize;
  g_seg.need_globals = true;
  // The header page is backed (written above): stores into it cannot fault.
  void* m = mmap(nullptr, kSegmentHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m != MAP_FAILED) {
    g_seg.header = static_cast<SegmentHeader*>(m);
    uint64_t pending = g_pending_drops.exchange(0, std::memory_order_relaxed);
    if (pending) __atomic_fetch_add(&g_seg.header->dropped_events, pending, __ATOMIC_RELAXED);
    g_drop_slot.store(&g_seg.header->dropped_events, std::memory_order_release);
  }
  return true;
}

// Abandons the thread's chunk (no further writes into it) and prepares it for the
// segment of `epoch`.
void SwitchLocked(ThreadState* ts, uint32_t epoch) {
  if (ts->chunk) munmap(ts->chunk, ts->chunk_end);
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
// far cheaper than faulting the hole in page by page through the mapping (~7 vs ~25 ns
// per 16-byte event here), and it reserves the disk space, so a full disk shows up
// here as an error instead of a SIGBUS on a store into the mapping. Nothing has been
// written at or beyond ts->limit, so the zeros never cover records. Takes the mutex:
// the fd must still be this chunk's segment. False when nothing could be added (the
// rest of the chunk is then given up).
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
  size_t n = ReadProcFile(path, name, sizeof(name));
  while (n > 0 && name[n - 1] == '\n') name[--n] = 0;
  WriteThreadNameRecord(ts, ts->tid, name, n, /*override_name=*/false, 0);
}

bool ClaimChunkLocked(ThreadState* ts) {
  uint32_t cur = ts->epoch;
  if (g_seg.epoch != cur) {
    if (!OpenSegmentLocked(cur)) {
      g_failed_epoch.store(cur, std::memory_order_relaxed);
      return false;
    }
  }
  uint64_t cs = g_chunk_size;
  uint64_t off = kSegmentHeaderSize + g_seg.next_chunk * cs;
  if (off + cs > g_seg.file_size) {
    if (!FileLimitAllows(off + cs) || ftruncate(g_seg.fd, off_t(off + cs)) != 0) {
      g_failed_epoch.store(cur, std::memory_order_relaxed);  // stop cleanly; drops are counted
      return false;
    }
    g_seg.file_size = off + cs;
  }
  void* m = mmap(nullptr, cs, PROT_READ | PROT_WRITE, MAP_SHARED, g_seg.fd, off_t(off));
  if (m == MAP_FAILED) {  // e.g. ulimit -v: stop cleanly, drops are counted
    g_failed_epoch.store(cur, std::memory_order_relaxed);
    return false;
  }
  g_seg.next_chunk++;
  if (ts->chunk) munmap(ts->chunk, ts->chunk_end);  // memory bound: only the current chunk
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
  ts->chunk_end = uint32_t(cs);
  ts->limit = 0;
  ts->window = kFirstWindow;
  if (!Prefault(ts) || ts->limit < 4096) {
    // Cannot back even the first page (disk full?): stop recording into this segment
    // rather than risk a SIGBUS. The chunk stays unpublished (magic 0).
    munmap(m, cs);
    ts->chunk = nullptr;
    ts->pos = ts->limit = ts->chunk_end = 0;
    g_failed_epoch.store(cur, std::memory_order_relaxed);
    return false;
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

void ThreadExit(void* p) {
  ThreadState* ts = static_cast<ThreadState*>(p);
  t_state = nullptr;
  t_dead = true;
  {
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    if (ts->prev) ts->prev->next = ts->next; else if (g_threads == ts) g_threads = ts->next;
    if (ts->next) ts->next->prev = ts->prev;
    g_retired_events += ts->events.load(std::memory_order_relaxed);
  }
  if (ts->chunk) munmap(ts->chunk, ts->chunk_end);
  ts->chunk = nullptr;
  ClearStringCache(ts);
  free(ts->scratch);
  delete ts;
}

void AtForkPrepare() { RecorderMutex().lock(); }
void AtForkParent() { RecorderMutex().unlock(); }
void AtForkChild() {
  // Only the forking thread exists here. Other threads' chunks still map the parent's
  // file: drop them (never written again); leak their states (tiny, owner gone).
  ThreadState* self = t_state;
  for (ThreadState* ts = g_threads; ts;) {
    ThreadState* next = ts->next;
    if (ts != self && ts->chunk) {
      munmap(ts->chunk, ts->chunk_end);
      ts->chunk = nullptr;
    }
    ts = next;
  }
  g_threads = nullptr;
  if (self) {
    self->next = self->prev = nullptr;
    g_threads = self;
    self->events.store(0, std::memory_order_relaxed);
  }
  g_retired_events = 0;
  // The inherited header mapping is the parent's file: never count into it.
  g_drop_slot.store(nullptr, std::memory_order_relaxed);
  g_pending_drops.store(0, std::memory_order_relaxed);
  g_dropped_total.store(0, std::memory_order_relaxed);
  if (g_seg.header) munmap(g_seg.header, kSegmentHeaderSize);
  if (g_seg.fd >= 0) close(g_seg.fd);
  g_seg = Segment();
  g_parent_pid = g_process_start_ns ? int64_t(getppid()) : 0;
  g_parent_process_start_ns = g_process_start_ns;
  g_inherited_ids = g_process_start_ns ? g_next_string_id.load(std::memory_order_relaxed) : 0;
  g_process_start_ns = 0;
  g_failed_epoch.store(0, std::memory_order_relaxed);
  uint32_t e = g_epoch.load(std::memory_order_relaxed) + 1;
  if (e == 0) e = 1;
  g_epoch.store(e, std::memory_order_release);
  // The mutex taken in AtForkPrepare is owned by the parent's thread id: unlocking it
  // here fails (recursive mutexes check the owner), so start from a fresh one.
  new (&RecorderMutex()) std::recursive_mutex();
}

}  // namespace

std::recursive_mutex& RecorderMutex() {
  // Never destroyed (NVTX calls from static destructors stay safe); storage kept so the
  // forked child can re-create the mutex in place.
  alignas(std::recursive_mutex) static unsigned char storage[sizeof(std::recursive_mutex)];
  static std::recursive_mutex* mu = new (storage) std::recursive_mutex();
  return *mu;
}

void EnsureRuntime() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (g_runtime_ready) return;
  g_runtime_ready = true;
  // Pin the library: the fork handlers and the thread-exit key point into it.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&EnsureRuntime), &info) && info.dli_fname) {
    dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
  pthread_key_create(&g_exit_key, ThreadExit);
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
}

ThreadState* CreateThreadState() {
  if (t_dead) return nullptr;
  EnsureRuntime();
  ThreadState* ts = new (std::nothrow) ThreadState();
  if (!ts) return nullptr;
  ts->tid = GetTid();
  {
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    uint64_t serial = g_thread_serial++;
    ts->serial = serial;
    ts->range_hi = (serial + 1) << kRangeCounterBits;
    ts->next = g_threads;
    if (g_threads) g_threads->prev = ts;
    g_threads = ts;
  }
  pthread_setspecific(g_exit_key, ts);
  t_state = ts;
  return ts;
}

uint8_t* ReserveSlow(ThreadState* ts, uint32_t n) {
  if (n > g_chunk_size - kChunkHeaderSize) return nullptr;
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

bool ConfigureFromEnvironment() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  InitChunkSizeLocked();
  if (g_dir) return true;
  const char* env = getenv("NVTX_TF_RECORD_DIR");
  if (!env || !*env) return false;
  if (MakeDirs(env) != 0) return false;
  char resolved[PATH_MAX];
  g_dir = strdup(realpath(env, resolved) ? resolved : env);
  if (!g_dir) return false;
  EnsureRuntime();
  return true;
}

int SetOutputDir(const char* dir) {
  if (!dir || !*dir) {
    errno = EINVAL;
    return -1;
  }
  if (MakeDirs(dir) != 0) return -1;
  char resolved[PATH_MAX];
  char* copy = strdup(realpath(dir, resolved) ? resolved : dir);
  if (!copy) {
    errno = ENOMEM;
    return -1;
  }
  EnsureRuntime();
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  InitChunkSizeLocked();
  g_dir = copy;  // the previous string is leaked on purpose (callers may hold it)
  CloseSegmentLocked();
  g_failed_epoch.store(0, std::memory_order_relaxed);
  uint32_t e = g_epoch.load(std::memory_order_relaxed) + 1;
  if (e == 0) e = 1;
  g_epoch.store(e, std::memory_order_release);
  return 0;
}

const char* OutputDir() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  return g_dir ? g_dir : "";
}

void CountDrop() {
  g_dropped_total.fetch_add(1, std::memory_order_relaxed);
  uint64_t* slot = g_drop_slot.load(std::memory_order_acquire);
  if (slot) {
    __atomic_fetch_add(slot, 1, __ATOMIC_RELAXED);
  } else {
    g_pending_drops.fetch_add(1, std::memory_order_relaxed);
  }
}

uint64_t DroppedCount() { return g_dropped_total.load(std::memory_order_relaxed); }

uint64_t NewSegment() {
  EnsureRuntime();
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (!g_dir) return 0;
  CloseSegmentLocked();
  g_failed_epoch.store(0, std::memory_order_relaxed);
  uint32_t e = g_epoch.load(std::memory_order_relaxed) + 1;
  if (e == 0) e = 1;
  g_epoch.store(e, std::memory_order_release);
  return NowNs();
}

uint64_t EventCount() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  uint64_t sum = g_retired_events;
  for (ThreadState* ts = g_threads; ts; ts = ts->next) sum += ts->events.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace nvtx_recorder
