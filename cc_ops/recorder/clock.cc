#include "recorder/clock.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "recorder/os_util.h"

#if NVTXREC_HAVE_TSC
#include <cpuid.h>
#endif

namespace nvtx_recorder {

std::atomic<uint32_t> g_clock_source{kClockUnset};

namespace {

constexpr uint64_t kCalibrationNs = 200 * 1000;  // first rate measurement
constexpr uint64_t kMaxSpanNs = 10 * 1000 * 1000;
constexpr int kSamples = 5;  // (TSC, clock_gettime) pairs per anchor; the tightest counts
constexpr int kMaxSamples = 50;
constexpr int kWaitForWriter = 256;  // pauses a reader past the line waits for its new anchor

// The shared line behind a latch (Linux's seqcount latch): the writer updates slot 0
// while readers use slot 1 (counter odd) and slot 1 while they use slot 0 (even), so a
// reader always finds a complete line and only retries when the counter moved meanwhile.
struct Slot {
  std::atomic<uint64_t> base_tsc{0}, base_ns{0}, mult{0}, span{0};
};
std::atomic<uint32_t> g_latch{0};
Slot g_slots[2];

// One writer at a time (anchoring, initialization, fork); a spin flag rather than a
// mutex so that a reader never blocks on it (it would deadlock in a signal handler that
// interrupted the writer) and a forked child simply clears it.
std::atomic<bool> g_writer{false};

// Writer state (under g_writer): the last anchor's measured pair and rate.
struct Sample {
  uint64_t tsc;
  uint64_t ns;
};
Sample g_last_sample{0, 0};
double g_rate = 0;  // ns per cycle

bool TryLockWriter() { return !g_writer.exchange(true, std::memory_order_acquire); }
void LockWriter() {
  while (!TryLockWriter()) sched_yield();
}
void UnlockWriter() { g_writer.store(false, std::memory_order_release); }

ClockLine ReadShared() {
  for (;;) {
    const uint32_t seq = g_latch.load(std::memory_order_acquire);
    const Slot& s = g_slots[seq & 1];
    ClockLine line{s.base_tsc.load(std::memory_order_relaxed), s.base_ns.load(std::memory_order_relaxed),
                   s.mult.load(std::memory_order_relaxed), s.span.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_latch.load(std::memory_order_relaxed) == seq) return line;
  }
}

void StoreSlot(Slot& s, const ClockLine& line) {
  s.base_tsc.store(line.base_tsc, std::memory_order_relaxed);
  s.base_ns.store(line.base_ns, std::memory_order_relaxed);
  s.mult.store(line.mult, std::memory_order_relaxed);
  s.span.store(line.span, std::memory_order_relaxed);
}

// Caller holds g_writer.
void Publish(const ClockLine& line) {
  g_latch.fetch_add(1, std::memory_order_relaxed);  // readers move to slot 1
  std::atomic_thread_fence(std::memory_order_release);
  StoreSlot(g_slots[0], line);
  g_latch.fetch_add(1, std::memory_order_release);  // readers move to slot 0 (complete)
  StoreSlot(g_slots[1], line);
}

#if NVTXREC_HAVE_TSC
inline uint64_t OrderedTsc() {
  _mm_lfence();
  uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
#else
inline uint64_t OrderedTsc() { return 0; }
#endif

// A CLOCK_MONOTONIC reading and the TSC at the same moment: the middle of the tightest of
// kSamples brackets, more (up to kMaxSamples) while none is within twice the tightest
// seen so far (an interrupt or preemption widens a bracket, and its middle is then off by
// up to half its width).
Sample TakeSample() {
  static uint64_t tightest = ~0ull / 4;  // under g_writer
  Sample best{0, 0};
  uint64_t best_gap = ~0ull;
  for (int i = 0; i < kMaxSamples && (i < kSamples || best_gap > 2 * tightest); ++i) {
    const uint64_t t0 = OrderedTsc();
    const uint64_t ns = MonotonicNs();
    const uint64_t t1 = OrderedTsc();
    if (t1 >= t0 && t1 - t0 < best_gap) {
      best_gap = t1 - t0;
      best = {t0 + (t1 - t0) / 2, ns};
    }
  }
  if (best_gap < tightest) tightest = best_gap;
  return best;
}

uint64_t Mult(double ns_per_cycle) { return uint64_t(ns_per_cycle * double(uint64_t(1) << kClockShift) + 0.5); }

// A rate from 0.01 to 100 ns per cycle (100 GHz .. 10 MHz): anything else is not a
// working counter.
bool PlausibleRate(double r) { return r > 0.01 && r < 100.0; }

// Caller holds g_writer. `cur` is the shared line a reader found itself past (or before,
// by more than a span). The new line starts no earlier than `cur` ends, and its slope
// makes it reach the measured CLOCK_MONOTONIC one span later.
void Anchor(const ClockLine& cur) {
  const Sample s = TakeSample();
  if (s.tsc > g_last_sample.tsc && s.ns > g_last_sample.ns) {
    const double rate = double(s.ns - g_last_sample.ns) / double(s.tsc - g_last_sample.tsc);
    // A rate off by more than 2x once is not the counter's (a suspend, a TSC reset): keep
    // the previous one; twice in a row, the counter's rate changed (a VM moved to another
    // host): take it.
    static int rejected = 0;  // under g_writer
    if (PlausibleRate(rate) && ((rate < 2 * g_rate && rate > g_rate / 2) || ++rejected >= 2)) {
      g_rate = rate;
      rejected = 0;
    }
  }
  const uint64_t end = LineNs(cur, cur.span);  // above any value `cur` gave
  const uint64_t base = s.ns > end ? s.ns : end;
  const uint64_t max_span = uint64_t(double(kMaxSpanNs) / g_rate);
  const uint64_t span = cur.span * 2 < max_span ? cur.span * 2 : max_span;
  double slope = g_rate - double(base - s.ns) / double(span);
  if (slope < g_rate / 2) slope = g_rate / 2;  // a large lead is worked off over several spans
  Publish({s.tsc, base, Mult(slope), span});
  g_last_sample = s;
}

bool InvariantTsc() {
#if NVTXREC_HAVE_TSC
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000007, &a, &b, &c, &d)) return false;
  return (d >> 8) & 1;
#else
  return false;
#endif
}

bool KernelClocksourceIsTsc() {
  char buf[64];
  ReadProcLine("/sys/devices/system/clocksource/clocksource0/current_clocksource", buf, sizeof(buf));
  return strcmp(buf, "tsc") == 0;
}

// NVTX_TF_RECORDER_CLOCK: auto (default; also for an unknown value), tsc, monotonic.
ClockSource ChooseSource() {
  const char* env = getenv("NVTX_TF_RECORDER_CLOCK");
  if (env && strcmp(env, "monotonic") == 0) return kClockMonotonic;
  if (!InvariantTsc()) return kClockMonotonic;
  if (env && strcmp(env, "tsc") == 0) return kClockTsc;
  return KernelClocksourceIsTsc() ? kClockTsc : kClockMonotonic;
}

// Caller holds g_writer. The first line: the rate over kCalibrationNs, a span of twice
// that. false when the TSC does not tick plausibly.
bool Calibrate() {
  const Sample s0 = TakeSample();
  while (MonotonicNs() - s0.ns < kCalibrationNs) {
  }
  const Sample s1 = TakeSample();
  if (s1.tsc <= s0.tsc || s1.ns <= s0.ns) return false;
  const double rate = double(s1.ns - s0.ns) / double(s1.tsc - s0.tsc);
  if (!PlausibleRate(rate)) return false;
  g_rate = rate;
  g_last_sample = s1;
  Publish({s1.tsc, s1.ns, Mult(rate), 2 * (s1.tsc - s0.tsc)});
  return true;
}

}  // namespace

void InitClock() {
  if (g_clock_source.load(std::memory_order_acquire) != kClockUnset) return;
  LockWriter();
  if (g_clock_source.load(std::memory_order_relaxed) == kClockUnset) {
    ClockSource source = ChooseSource();
    if (source == kClockTsc && !Calibrate()) source = kClockMonotonic;
    g_clock_source.store(source, std::memory_order_release);
  }
  UnlockWriter();
}

ClockSource CurrentClockSource() {
  InitClock();
  return ClockSource(g_clock_source.load(std::memory_order_acquire));
}

uint64_t ClockNowSlow(ClockLine* line) {
  if (NVTXREC_UNLIKELY(g_clock_source.load(std::memory_order_acquire) == kClockUnset)) InitClock();
  if (g_clock_source.load(std::memory_order_relaxed) != kClockTsc) return MonotonicNs();
  for (int waited = 0;; ++waited) {
    const uint32_t seq = g_latch.load(std::memory_order_acquire);
    const ClockLine cur = ReadShared();
    uint64_t delta = ReadTscOrdered() - cur.base_tsc;
    // Before the anchor by less than a span (another CPU's counter a few cycles behind, a
    // read issued early): the anchor itself, so that no value precedes the line's start.
    if (int64_t(delta) < 0 && uint64_t(-int64_t(delta)) < cur.span) delta = 0;
    if (delta < cur.span) {
      if (line) *line = cur;
      return LineNs(cur, delta);
    }
    if (TryLockWriter()) {
      if (g_latch.load(std::memory_order_relaxed) == seq) Anchor(cur);
      UnlockWriter();
      continue;
    }
    // Another thread (or the code this signal handler interrupted) is anchoring: wait a
    // little, then take the end of the current line, which the next one does not precede.
    if (waited >= kWaitForWriter) return LineNs(cur, cur.span);
#if NVTXREC_HAVE_TSC
    _mm_pause();
#endif
  }
}

uint64_t ClockNowShared() { return ClockNowSlow(nullptr); }

void ClockAtForkPrepare() { LockWriter(); }
void ClockAtForkParent() { UnlockWriter(); }
// The child may run on another CLOCK_MONOTONIC than its parent (a time namespace entered
// before the fork): its line starts anew on its own clock, not continued from the
// parent's (whose next anchor would jump to the child's clock mid-run). Same rate.
void ClockAtForkChild() {
  if (g_clock_source.load(std::memory_order_relaxed) == kClockTsc) {
    const Sample s = TakeSample();
    Publish({s.tsc, s.ns, Mult(g_rate), ReadShared().span});
    g_last_sample = s;
  }
  UnlockWriter();
}

}  // namespace nvtx_recorder
