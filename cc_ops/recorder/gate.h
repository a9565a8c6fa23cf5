// What gets written: the capture range (only events inside windows opened and closed by
// a named NVTX range, as `nsys profile --capture-range=nvtx --nvtx-capture=NAME[@DOMAIN]
// --capture-range-end=...`) and the domain filter (nsys's --nvtx-domain-include/-exclude).
//
// Neither set (the default): g_gate is 0 and the hot path pays one relaxed load and a
// not-taken branch. Otherwise every event goes through the gated paths in callbacks.cc.
//
// Semantics (checked against Nsight Systems 2022.4, tests/test_capture_range.py):
// * a window opens on a push/pop or start/end range (never a mark) whose message equals
//   NAME exactly (ASCII or registered string; nsys by default only looks at registered
//   strings unless NSYS_NVTX_PROFILER_REGISTER_ONLY=0) in the named domain: NAME alone is
//   the default domain, NAME@* any domain;
// * the opening range is inside its window; the window closes when that range closes
//   (a same-named range nested inside does not close it);
// * only ranges that start inside a window are written, with every thread's events; a
//   range opened before the window and closed inside is dropped (start and end), one
//   opened inside keeps its real end even after the window closed (nsys cuts it at the
//   window's end); marks are written inside windows only; a range open when the capture
//   range is set (or cleared) keeps the fate it had at its start: written (or not);
// * definitions (domains, registered strings, categories, thread names) are always
//   written, so events inside a window resolve;
// * end mode: stop (one window), repeat[:N] (up to N windows, 0: no limit), none (the
//   window never closes).
// * Windows are per process. A forked child inherits the state of the moment; a push/pop
//   window opened there by a thread other than the forking one stays open in the child.
// * Domain filter: an excluded domain gets a null handle from nvtxDomainCreate when the
//   default domain is excluded too (a null handle is the default domain), else a handle
//   whose events are dropped; callers that check the handle skip their work, and
//   nvtxDomainIsEnabled (injection.cc) says 0 for it.
#ifndef NVTX_PLUGINS_TF_RECORDER_GATE_H_
#define NVTX_PLUGINS_TF_RECORDER_GATE_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "recorder/recorder_internal.h"
#include "recorder/segment_writer.h"

namespace nvtx_recorder {

constexpr uint32_t kGateCapture = 1;
constexpr uint32_t kGateDomains = 2;
extern std::atomic<uint32_t> g_gate;

// Domain id of the handle handed out for excluded domains (never a real domain's id).
constexpr uint16_t kDisabledDomain = 0xFFFF;

inline bool GateActive() { return NVTXREC_UNLIKELY(g_gate.load(std::memory_order_relaxed) != 0); }
inline bool CaptureRangeSet() { return (g_gate.load(std::memory_order_relaxed) & kGateCapture) != 0; }

// Reads NVTX_TF_CAPTURE_RANGE, NVTX_TF_CAPTURE_RANGE_END, NVTX_TF_DOMAIN_INCLUDE and
// NVTX_TF_DOMAIN_EXCLUDE once.
void ConfigureGateFromEnvironment();

// Control API: sets (spec non-empty) or clears (null/empty) the capture range; end as for
// NVTX_TF_CAPTURE_RANGE_END (null: stop). 0, or -1 with errno EINVAL on a bad value.
int SetCaptureRange(const char* spec, const char* end);
// Windows opened since the capture range was set; whether one is open now.
uint64_t CaptureWindowsOpened();
bool CaptureWindowOpen();

// Domain filter: whether a domain named `name` is excluded; whether the default domain is.
bool DomainNameExcluded(const char* name, size_t len);
bool DefaultDomainExcluded();
inline bool DomainDisabled(uint16_t domain) {
  return domain == kDisabledDomain || (domain == 0 && DefaultDomainExcluded());
}

// Hooks from the registry (under the recorder mutex).
void GateNoteDomain(uint16_t id, const char* name, size_t len);
void GateNoteRegisteredString(uint16_t domain, uint32_t id, const char* text, size_t len);

// ---- capture decisions (callbacks.cc; only while a capture range is set) ----
//
// A range's fate is decided at its start and kept to its end: a push that is not
// written sets its (domain, depth) bit in the thread's FateTable (segment_writer.h), a
// start that is not written carries kSkippedRangeBit in its id; their pop / end is then
// not written either, whatever the window's state by then, and every other pop / end is.
//
// Time: a written event's timestamp lies inside its window, [the opening range's start,
// the closing range's end], also when threads race the opening or closing: the opener
// stamps its range before it publishes the window; an event inside reads the window's
// state, then the clock (ordered), then the state again, and counts as inside only if
// the same window was open both times; the closing range publishes the close (a locked
// exchange) before it reads the clock for its end (CloseWindowIfOpener).

// Where the thread's event, `*now` being its time, is written: inside an open window,
// or opening one (a push / start, `opener` non-null, whose message names the window).
// May re-read *now (an event that finds a window opened meanwhile is stamped after it).
struct WindowOpener {
  uint64_t thread;  // the thread's serial + 1 (ThreadState::serial: never reused, unlike its address)
  uint16_t domain;
  int32_t depth;      // push windows
  uint64_t range_id;  // start windows (0 for a push)
  int msg_kind;       // as in callbacks.cc's Event
  const void* msg;
};
bool DecideWritten(ThreadState* ts, uint64_t* now, const WindowOpener* opener);

// The pop of (thread, domain, depth) / the end of range_id: closes the window it opened.
// Call before the clock is read for that pop / end. `thread` as in WindowOpener.
void ClosePushWindowIfOpener(uint64_t thread, uint16_t domain, int32_t depth);
void CloseStartWindowIfOpener(uint64_t range_id);

// The thread's fate bits (segment_writer.h's FateTable). MarkUnwritten: the push at
// (domain, depth) was not written, for `reason` (false when no memory: a skipped push is
// then written instead, a dropped one's pop written unpaired). TakeUnwritten: the reason
// its push was not written, or kWritten, clearing the bit. ReleaseFates: thread exit.
enum Unwritten : uint32_t { kWritten = 0, kSkipped = 1, kDropped = 2 };
bool MarkUnwritten(ThreadState* ts, uint16_t domain, int32_t depth, Unwritten reason);
Unwritten TakeUnwritten(ThreadState* ts, uint16_t domain, int32_t depth);
void ReleaseFates(ThreadState* ts);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_GATE_H_
