// Segment files, chunks and per-thread record streams (the hot path is inline here).
//
// Every thread that records owns a ThreadState (heap, reached through one
// thread-local pointer). The thread appends records to the chunk it currently has
// mapped (MAP_SHARED view of the segment file, so a SIGKILL loses nothing written);
// only claiming a new chunk takes the recorder mutex. A record is written body first
// and its first word last (release), so the reader stops at the first zero word.
//
// A process-wide epoch names the segment threads must write into. It changes when the
// output directory is switched (nvtx_recorder_set_output_dir) and in a forked child;
// a thread whose ThreadState carries an older epoch abandons its chunk (munmap, no
// further writes) and claims a fresh one from the current segment on its next record.
#ifndef NVTX_PLUGINS_TF_RECORDER_SEGMENT_WRITER_H_
#define NVTX_PLUGINS_TF_RECORDER_SEGMENT_WRITER_H_

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <atomic>
#include <mutex>

#include "format/record_format.h"
#include "recorder/clock.h"
#include "recorder/os_util.h"
#include "recorder/recorder_internal.h"

namespace nvtx_recorder {

constexpr int kStringCacheSize = 1024;              // direct-mapped, per thread
constexpr uint32_t kMaxCachedStringBytes = 1024;    // longer texts are defined per use
constexpr uint32_t kStringArenaBytes = 256 * 1024;  // the cached copies (string_table.cc)
constexpr int kDomainIds = 65536;                   // push/pop depth: one counter per domain id
constexpr uint32_t kMaxEventRecordBytes = 40;
// Chunks are brought into the page cache window by window as the thread fills them (see
// Prefault in segment_writer.cc): cheap page faults on the hot path, and at most one
// window of a chunk's unused tail gets allocated on disk. A new chunk starts with a
// kFirstWindow window and doubles it up to kPopulateWindow, so a thread that records a
// handful of events costs one page of disk, not a whole window.
constexpr uint32_t kPopulateWindow = 64 * 1024;
constexpr uint32_t kFirstWindow = 4096;

struct StringCacheEntry {
  uint64_t hash;
  uint32_t len;
  uint32_t id;  // 0: empty slot
  char* text;   // copy in the thread's string arena
};

// First-level message cache keyed by the caller's pointer; a hit is confirmed by
// comparing the text with the interned copy (cache[slot]) so reused buffers are safe.
struct PointerCacheEntry {
  const char* ptr;
  uint32_t slot;
  uint32_t id;
};
constexpr int kPointerCacheSize = 256;

// Which open push/pop ranges of a thread were not written: skipped (a capture range was
// set and no window open at their push, gate.h) or dropped (no space: counted); one bit
// per (domain, depth) and reason, in an open-addressing table of 64-bit words keyed by
// (reason, domain, depth / 64), in memory of its own (fate_table.cc). Only open unwritten
// ranges have a bit set, so a push written needs no bit at all.
struct FateWord {
  uint64_t key;  // ((reason << 48) | (domain << 32) | depth / 64) + 1; 0: empty
  uint64_t bits;
};
struct FateTable {
  FateWord* words;    // null until the first skipped push
  uint32_t capacity;  // power of two
  uint32_t used;
};

// Every thread that records owns one, in zeroed memory of its own (MapZeroed: never
// malloc, see os_util.h); its pages materialize as they are touched (depth[] is large
// and mostly untouched).
struct ThreadState {
  // Hot fields first.
  uint8_t* chunk;         // currently mapped chunk, or null
  uint32_t pos;           // offset of the next record inside the chunk
  uint32_t limit;         // end of the prefaulted part of the chunk (0: no chunk)
  uint32_t chunk_end;     // chunk size when a chunk is mapped, else 0
  uint32_t skipped_open;  // open push/pop ranges not written (FateTable bits set)
  uint64_t chunk_offset;  // file offset of the chunk
  // The chunk's clock (record_format.h, compact events): the timestamp of the last event
  // record written into the current chunk, and the offset from which the next event is
  // written in full (0 in a new chunk: its first event; then each kClockSyncBytes).
  uint64_t chunk_clock;
  uint32_t clock_end;
  uint32_t epoch;       // epoch the chunk belongs to (0: none yet)
  uint32_t gen;         // bumped whenever the thread switches segment
  uint32_t busy;        // inside an entry point (re-entrancy guard: signal handlers)
  uint32_t in_segment;  // has claimed a chunk in the current segment
  uint64_t range_hi;    // (thread serial + 1) << kRangeCounterBits
  uint64_t range_counter;
  std::atomic<uint64_t> events;  // written by the owner only, read by control API
  ClockLine clock;               // this thread's copy of the clock's line (clock.h)
  int64_t tid;
  uint64_t seq;  // next chunk seq in the current segment
  uint32_t seg_thread_index;
  uint32_t window;    // size of the next Prefault window
  uint64_t serial;    // process-wide thread serial (ChunkHeader.thread_serial - 1)
  ThreadState* next;  // list of live thread states (under RecorderMutex)
  ThreadState* prev;
  char* scratch;  // UTF-32 -> UTF-8 conversion buffer (MapZeroed)
  size_t scratch_cap;
  char* arena;  // kStringArenaBytes for the cache's copies (MapZeroed, on first use)
  uint32_t arena_used;
  FateTable fates;
  PointerCacheEntry ptr_cache[kPointerCacheSize];
  StringCacheEntry cache[kStringCacheSize];
  int32_t depth[kDomainIds];  // push/pop nesting depth per domain id
};

// A start/end range id: (thread serial + 1) << kRangeCounterBits | bit 39: the start was
// not written (a capture range was set and no window open, or its domain is filtered
// out: its end is not written either, wherever it happens) | bit 38: with bit 39, the
// start was dropped (no space, re-entered: counted), so its end counts as dropped too
// | a 38-bit counter.
constexpr int kRangeCounterBits = 40;
constexpr uint64_t kSkippedRangeBit = uint64_t(1) << 39;
constexpr uint64_t kDroppedRangeBit = uint64_t(1) << 38;
constexpr uint64_t kUnwrittenRangeBits = kSkippedRangeBit | kDroppedRangeBit;
constexpr uint64_t kRangeCounterMask = kDroppedRangeBit - 1;

// ---- process-wide state ----
extern std::atomic<uint32_t> g_epoch;
extern uint32_t g_chunk_size;  // fixed once configured

// Guards everything but the hot path (thread_lifetime.cc).
std::recursive_mutex& RecorderMutex();

// CLOCK_MONOTONIC nanoseconds (clock.h): NowNs(ts) on the hot path, through the thread's
// copy of the clock's line; NowNs() where there is no thread state at hand. One function
// of the TSC either way, so timestamps from both are ordered as their reads are.
// NowNsOrdered(ts) for events another thread may have caused (clock.h: ReadTscOrdered).
NVTXREC_INLINE uint64_t NowNs(ThreadState* ts) { return ClockNow<false>(&ts->clock); }
NVTXREC_INLINE uint64_t NowNsOrdered(ThreadState* ts) { return ClockNow<true>(&ts->clock); }
inline uint64_t NowNs() { return ClockNowShared(); }

// Largest text a kStringDef may carry so that it fits a fresh chunk.
inline uint32_t MaxStringBytes() { return g_chunk_size - nvtx_record::kChunkHeaderSize - 16; }

inline uint64_t MakeWord0(uint8_t kind, uint8_t flags, uint16_t domain, uint32_t msg) {
  return uint64_t(kind) | (uint64_t(flags) << 8) | (uint64_t(domain) << 16) | (uint64_t(msg) << 32);
}

// Thread state of the calling thread, created on first use; null when it cannot exist
// (thread exiting, allocation failure): the caller then drops the event. Thread states
// are created and freed in thread_lifetime.cc.
ThreadState* CreateThreadState();
extern __thread ThreadState* t_state;
inline ThreadState* GetThreadState() {
  ThreadState* ts = t_state;
  if (NVTXREC_LIKELY(ts != nullptr)) return ts;
  return CreateThreadState();
}

// Marks the calling thread as inside the recorder for the guard's lifetime. Every entry
// point (events, registrations, the control API) holds one: an NVTX call from a signal
// handler that interrupted another on the same thread finds the thread busy and is
// dropped (counted), since the interrupted call may hold the recorder mutex, be half way
// through a record or a registry update. ts() is null when the thread has no state
// (exiting) or was busy (reentered() then says so).
class EntryGuard {
 public:
  EntryGuard() : ts_(GetThreadState()) {
    if (ts_) {
      if (ts_->busy) {
        ts_ = nullptr;
        reentered_ = true;
      } else {
        ts_->busy = 1;
      }
    }
  }
  ~EntryGuard() {
    if (ts_) ts_->busy = 0;
  }
  EntryGuard(const EntryGuard&) = delete;
  EntryGuard& operator=(const EntryGuard&) = delete;
  ThreadState* ts() const { return ts_; }
  bool reentered() const { return reentered_; }

 private:
  ThreadState* ts_;
  bool reentered_ = false;
};

// The start of every registration (names, strings, domains, payload schemas and enums):
// the program's errno kept; one that re-enters the recorder on its thread (from a signal
// handler) is dropped, counted, and returns `fallback`, a handle that is still usable (a
// string id never defined, the default domain, schema id 0).
#define NVTXREC_REGISTRATION(fallback)  \
  nvtx_recorder::ErrnoGuard keep_errno; \
  nvtx_recorder::EntryGuard guard;      \
  if (guard.reentered()) {              \
    nvtx_recorder::CountDrop();         \
    return fallback;                    \
  }                                     \
  static_assert(true, "")

// Space for an `n`-byte record (n multiple of 8, n <= chunk payload) in the thread's
// current chunk of the current segment; null if recording is impossible right now.
// Does not advance; Commit() publishes. May switch segment (ts->gen changes) or claim
// a chunk (takes the recorder mutex).
uint8_t* ReserveSlow(ThreadState* ts, uint32_t n);
// Seals the thread's chunk (nvtx_record::ChunkHeader::sealed_end, sums over its records)
// and unmaps it. Only the owning thread, leaving the chunk for good, in the process that
// claimed it (never a forked child: the chunk is its parent's).
void SealAndUnmapChunk(ThreadState* ts);
// Unmaps the thread's chunk, all g_chunk_size bytes of its mapping (chunk_end may be lower:
// Prefault lowers it to what could be backed), without sealing; ts->chunk becomes null.
void UnmapChunk(ThreadState* ts);
inline uint8_t* Reserve(ThreadState* ts, uint32_t n) {
  if (NVTXREC_LIKELY(ts->epoch == g_epoch.load(std::memory_order_relaxed) && ts->pos + n <= ts->limit)) {
    return ts->chunk + ts->pos;
  }
  return ReserveSlow(ts, n);
}

// Publishes a record whose body is already written at p: first word last, release.
inline void Commit(ThreadState* ts, uint8_t* p, uint64_t word0, uint32_t n) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(p), word0, __ATOMIC_RELEASE);
  ts->pos += n;
}

// Counts an event the recorder could not record (no space, file size limit, no thread
// state, re-entrant call): stored in the current segment's header (dropped_events),
// lock-free. Never on the fast path.
void CountDrop();

inline void CountEvent(ThreadState* ts) {
  ts->events.store(ts->events.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Events dropped by this process so far (all segments).
uint64_t DroppedCount();

// Closes the current segment and moves every thread to a new one in the output
// directory on its next record (a new epoch). Caller holds RecorderMutex().
void StartNewEpochLocked();
// Before a new epoch starts at a window's boundary (NewSegment): drops counted in the
// ending epoch whose segment never opened (no event written in it) get that segment now,
// holding them, so that the window's reader finds them (else they stay in the last segment).
void HoldWindowDropsLocked();
// Fork handler of the segment writer, in the child: forgets the parent's segment and
// counters, notes the parent as this process' parent and starts a new epoch.
void SegmentWriterAfterForkInChild();

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_SEGMENT_WRITER_H_
