// The recorder's clock: CLOCK_MONOTONIC nanoseconds for every timestamp it writes, read
// from the CPU's time stamp counter (TSC) where that is safe, else from clock_gettime.
//
// Why: clock_gettime(CLOCK_MONOTONIC) through the vDSO is a large share of an event's
// cost and rdtsc a fraction of it (benchmarks/bench_recorder_native.py runs the recorder
// under each clock, NVTX_TF_RECORDER_CLOCK=tsc|monotonic, side by side, and prints both
// per-event costs). The recording's contract does not change: timestamps are
// CLOCK_MONOTONIC nanoseconds (readers, exports, merge's realtime anchors and capture
// windows compare them with other CLOCK_MONOTONIC times), non-decreasing per thread, and
// ordered across threads as the TSC is.
//
// Source, decided once per process (InitClock; a forked child keeps its parent's):
// * tsc: the CPU says its TSC is invariant (CPUID 0x80000007 EDX bit 8: constant rate,
//   runs in every C/P state) and the kernel's current clocksource is "tsc" (the kernel
//   checked the TSCs of all CPUs agree and bases CLOCK_MONOTONIC on them itself);
// * monotonic: anything else, or NVTX_TF_RECORDER_CLOCK=monotonic. The variable's other
//   values: auto (the default, the rule above) and tsc (the TSC whenever it is invariant,
//   whatever the kernel's clocksource; for experiments).
//
// Conversion: ns = base_ns + ((tsc - base_tsc) * mult) >> kClockShift, a line anchored on
// a (TSC, clock_gettime) pair. A line is valid for `span` cycles after its anchor; the
// first reader past that anchors the next one (ClockNowSlow), so the conversion follows
// CLOCK_MONOTONIC, NTP slewing included, to within its rate change over one span. The
// lines form one function of the TSC that never decreases:
// * a line is only ever used for TSC values in [base_tsc, base_tsc + span) (a TSC below
//   the anchor counts as the anchor);
// * the next line starts no earlier than the end of the previous one (its base_ns is at
//   least the previous line's value at base_tsc + span) and its slope makes it meet the
//   measured CLOCK_MONOTONIC one span later (so an early start is worked off, not kept);
// * the shared line is published through a two-slot latch (readers never wait, even in a
//   signal handler that interrupted the writer); each thread keeps a copy in its state.
// Spans start at 0.4 ms after a 0.2 ms calibration and double up to 10 ms, the rate being
// measured between consecutive anchors.
#ifndef NVTX_PLUGINS_TF_RECORDER_CLOCK_H_
#define NVTX_PLUGINS_TF_RECORDER_CLOCK_H_

#include <stdint.h>
#include <time.h>

#include <atomic>

#include "recorder/recorder_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define NVTXREC_HAVE_TSC 1
#else
#define NVTXREC_HAVE_TSC 0
#endif

namespace nvtx_recorder {

enum ClockSource : uint32_t { kClockUnset = 0, kClockMonotonic = 1, kClockTsc = 2 };
constexpr int kClockShift = 32;

// One piece of the TSC -> CLOCK_MONOTONIC conversion. span 0: no line (not yet read, or
// the source is clock_gettime): every read takes ClockNowSlow.
struct ClockLine {
  uint64_t base_tsc;
  uint64_t base_ns;
  uint64_t mult;  // ns per cycle << kClockShift
  uint64_t span;  // cycles after base_tsc the line may be used for
};

inline uint64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline uint64_t ReadTsc() {
#if NVTXREC_HAVE_TSC
  // Plain rdtsc (not rdtscp / lfence: those wait for earlier instructions, a cost on every
  // event that buys no ordering the conversion needs). Per thread, successive reads
  // do not go backwards (program order, and a migration passes through the kernel); the
  // conversion tolerates a read a few cycles off its neighbours (see ClockNowSlow).
  return __rdtsc();
#else
  return 0;
#endif
}

// An ordered read, for events that another thread may have caused: rdtscp waits until every
// earlier instruction has executed and every earlier load is globally visible, so a read
// that follows an acquire (a range id handed over by another thread, a window opened
// there) is not taken before it. A plain rdtsc may execute ahead of that load and stamp
// an end before its start (tests/test_review_defects.py, clk_pp). Writes need no fence:
// the reading instruction retires before any later store becomes visible.
inline uint64_t ReadTscOrdered() {
#if NVTXREC_HAVE_TSC
  unsigned int aux;
  return __rdtscp(&aux);
#else
  return 0;
#endif
}

inline uint64_t LineNs(const ClockLine& line, uint64_t delta) {
  return line.base_ns + uint64_t((static_cast<unsigned __int128>(delta) * line.mult) >> kClockShift);
}

// Decides the source and calibrates (about 0.2 ms with the TSC); idempotent, thread-safe.
void InitClock();
// The source in use (initializing it if needed).
ClockSource CurrentClockSource();

// The source once decided (kClockUnset before InitClock).
extern std::atomic<uint32_t> g_clock_source;

// Reads the clock, refreshing `line` (a thread's copy of the shared line).
uint64_t ClockNowSlow(ClockLine* line);

// The hot path: a thread's copy of the line; clock_gettime inline when that is the
// source (no call on the way); else ClockNowSlow. kOrdered: ReadTscOrdered (start, end,
// marks and every event of the gated paths); else the plain read (push/pop: a thread's
// own nesting, ordered by program order). clock_gettime is ordered either way (the
// vDSO fences its own read); ClockNowSlow always reads ordered.
template <bool kOrdered>
NVTXREC_INLINE uint64_t ClockNow(ClockLine* line) {
  if (NVTXREC_LIKELY(line->span != 0)) {
    const uint64_t tsc = kOrdered ? ReadTscOrdered() : ReadTsc();
    const uint64_t delta = tsc - line->base_tsc;  // a TSC below the anchor wraps: slow path
    if (NVTXREC_LIKELY(delta < line->span)) return LineNs(*line, delta);
  } else if (g_clock_source.load(std::memory_order_relaxed) == kClockMonotonic) {
    return MonotonicNs();
  }
  return ClockNowSlow(line);
}

// The same function without a thread's copy (segment headers, domains, control API).
uint64_t ClockNowShared();

// Fork handlers (thread_lifetime.cc): no line is half-published across fork().
void ClockAtForkPrepare();
void ClockAtForkParent();
void ClockAtForkChild();

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_CLOCK_H_
