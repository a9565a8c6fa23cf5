// NVTX calls -> records. Hot path (push/pop/start/end/mark): thread-local state, one
// clock read, an interning-cache probe for the message, a bounds check and a few
// stores into the mapped chunk. No locks, syscalls or allocation unless a chunk is full,
// a message is new to the thread, or the recording segment changed.
#include "recorder/callbacks.h"

#include <stddef.h>
#include <string.h>

#include <atomic>

#include "recorder/gate.h"
#include "recorder/payload_ext.h"
#include "recorder/registry.h"
#include "recorder/segment_writer.h"
#include "recorder/string_ids.h"
#include "recorder/string_table.h"

namespace nvtx_recorder {

using namespace nvtx_record;

namespace {

enum MsgKind { kMsgNone = 0, kMsgAscii = 1, kMsgUnicode = 2, kMsgRegistered = 3 };

struct Event {
  uint8_t flags = 0;
  uint8_t msg_kind = kMsgNone;
  uint32_t color = 0;
  uint32_t category = 0;
  uint64_t payload = 0;
  const void* msg = nullptr;
  const void* ext = nullptr;  // nvtxPayloadData_t array (NVTX_PAYLOAD_TYPE_EXT), ext_count entries
  int32_t ext_count = 0;
};

std::atomic<uint64_t> g_fallback_range_ids{1};
constexpr int kRecordAttempts = 16;

// Range id when the thread has no state (exiting thread, or busy): still nonzero and
// unique; its start was not written (counted as dropped), so its end is not either.
uint64_t FallbackRangeId() {
  return (uint64_t(1) << 63) | kUnwrittenRangeBits |
         (g_fallback_range_ids.fetch_add(1, std::memory_order_relaxed) & kRangeCounterMask);
}

inline uint16_t DomainId(nvtxDomainHandle_t h) {
  uintptr_t v = reinterpret_cast<uintptr_t>(h);
  return v <= 0xFFFF ? uint16_t(v) : 0;  // handles we hand out are small integers
}

inline nvtxDomainHandle_t DomainHandle(uint16_t id) { return reinterpret_cast<nvtxDomainHandle_t>(uintptr_t(id)); }

// Reads the attributes NVTX defines, honoring version and size: a field is used only if
// it lies entirely within `size` bytes. Unknown enum values drop that attribute.
NVTXREC_INLINE void ParseAttributes(const nvtxEventAttributes_t* a, Event* ev) {
  if (!a) return;
  const size_t size = a->size;
  if (a->version == 0 || size < offsetof(nvtxEventAttributes_t, category)) return;
#define NVTXREC_HAS(field) (offsetof(nvtxEventAttributes_t, field) + sizeof(a->field) <= size)
  if (NVTXREC_HAS(category) && a->category != 0) {
    ev->flags |= kFlagCategory;
    ev->category = a->category;
  }
  if (NVTXREC_HAS(color) && a->colorType == NVTX_COLOR_ARGB) {
    ev->flags |= kFlagColor;
    ev->color = a->color;
  }
  if (NVTXREC_HAS(payload)) {
    uint8_t type = kPayloadNone;
    uint64_t v = 0;
    switch (a->payloadType) {
      case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
        type = kPayloadU64;
        v = a->payload.ullValue;
        break;
      case NVTX_PAYLOAD_TYPE_INT64:
        type = kPayloadI64;
        v = uint64_t(a->payload.llValue);
        break;
      case NVTX_PAYLOAD_TYPE_DOUBLE:
        type = kPayloadDouble;
        memcpy(&v, &a->payload.dValue, 8);
        break;
      case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32:
        type = kPayloadU32;
        v = a->payload.uiValue;
        break;
      case NVTX_PAYLOAD_TYPE_INT32:
        type = kPayloadI32;
        v = uint32_t(a->payload.iValue);
        break;
      case NVTX_PAYLOAD_TYPE_FLOAT: {
        uint32_t bits;
        memcpy(&bits, &a->payload.fValue, 4);
        type = kPayloadFloat;
        v = bits;
        break;
      }
      default:
        if (a->payloadType == kNvtxPayloadTypeExt && a->payload.ullValue != 0) {
          ev->ext = reinterpret_cast<const void*>(uintptr_t(a->payload.ullValue));
          ev->ext_count = a->reserved0;
        }
        break;
    }
    ev->flags |= uint8_t(type << kPayloadShift);
    ev->payload = v;
  }
  if (NVTXREC_HAS(message)) {
    switch (a->messageType) {
      case NVTX_MESSAGE_TYPE_ASCII:
        ev->msg_kind = kMsgAscii;
        ev->msg = a->message.ascii;
        break;
      case NVTX_MESSAGE_TYPE_UNICODE:
        ev->msg_kind = kMsgUnicode;
        ev->msg = a->message.unicode;
        break;
      case NVTX_MESSAGE_TYPE_REGISTERED:
        ev->msg_kind = kMsgRegistered;
        ev->msg = a->message.registered;
        break;
      default:
        break;
    }
    if (!ev->msg) ev->msg_kind = kMsgNone;
  }
#undef NVTXREC_HAS
}

__attribute__((noinline)) uint32_t ResolveOtherMessage(ThreadState* ts, const Event& ev, uint8_t* flags) {
  switch (ev.msg_kind) {
    case kMsgUnicode: {
      const char* u;
      size_t len = Utf32ToUtf8(ts, static_cast<const wchar_t*>(ev.msg), MaxStringBytes(), &u);
      return Intern(ts, u, len);
    }
    case kMsgRegistered:
      *flags |= kFlagRegisteredMessage;
      return uint32_t(reinterpret_cast<uintptr_t>(ev.msg));
    default:
      return 0;
  }
}

NVTXREC_INLINE uint32_t ResolveMessage(ThreadState* ts, const Event& ev, uint8_t* flags) {
  if (NVTXREC_LIKELY(ev.msg_kind == kMsgAscii)) return InternCString(ts, static_cast<const char*>(ev.msg));
  if (ev.msg_kind == kMsgNone) return 0;
  return ResolveOtherMessage(ts, ev, flags);
}

// Appends one event record: word0 | timestamp | [range id] | [color, category] | [payload],
// or its compact form (word | [range id]). n is the full form's length (what is reserved).
// False when it could not (no space, no message id): the event was counted as dropped.
NVTXREC_INLINE bool Record(ThreadState* ts, uint8_t kind, uint16_t domain, const Event& ev, uint64_t now,
                           bool has_range_id, uint64_t range_id) {
  const bool has_cc = (ev.flags & (kFlagColor | kFlagCategory)) != 0;
  // Extended payloads (rare): their block follows the record's fixed fields.
  const uint8_t* block = nullptr;
  uint32_t block_len = 0;
  if (NVTXREC_UNLIKELY(ev.ext != nullptr)) block_len = BuildPayloadBlock(domain, ev.ext, ev.ext_count, &block);
  const bool has_payload = (ev.flags & kPayloadMask) != 0 || block != nullptr;
  const uint32_t n = 16 + (has_range_id ? 8 : 0) + (has_cc ? 8 : 0) + (has_payload ? 8 : 0) + block_len;
  // A segment switch between defining the message and reserving the record (another thread
  // started a new segment) means the message must be defined again in the new segment:
  // retried, as long as switches keep coming (many in a row only under a sanitizer).
  for (int attempt = 0; attempt < kRecordAttempts; ++attempt) {
    const uint32_t gen = ts->gen;
    uint8_t flags = block ? uint8_t((ev.flags & ~kPayloadMask) | (kPayloadExt << kPayloadShift)) : ev.flags;
    uint32_t msg = ResolveMessage(ts, ev, &flags);
    // No id: the message could not be defined (no space); never record it nameless.
    if (NVTXREC_UNLIKELY(msg == 0) && ev.msg_kind != kMsgNone) break;
    uint8_t* p = Reserve(ts, n);
    if (NVTXREC_UNLIKELY(!p)) break;
    // The thread moved to a new segment meanwhile: its strings must be defined there.
    if (NVTXREC_UNLIKELY(ts->gen != gen) && (ev.msg_kind == kMsgAscii || ev.msg_kind == kMsgUnicode)) {
      continue;
    }
    // The compact form (record_format.h) when the event has no flags and its ids and its
    // time since the chunk's previous event fit: one word (+ range id), half the bytes.
    // The full form at least once per kClockSyncBytes of the chunk, so that damage inside a
    // chunk leaves the compact events after the next such one datable. (after Reserve: a
    // new chunk resets the chunk's clock)
    const uint64_t delta = now - ts->chunk_clock;
    ts->chunk_clock = now;
    if (NVTXREC_LIKELY(flags == 0 && delta < kCompactDeltaLimit && domain < kCompactDomainLimit &&
                       msg < kCompactMsgLimit && ts->pos < ts->clock_end)) {
      if (has_range_id) memcpy(p + 8, &range_id, 8);
      Commit(ts, p, CompactWord(kind, domain, msg, delta), has_range_id ? 16 : 8);
      CountEvent(ts);
      return true;
    }
    ts->clock_end = (ts->pos & ~(kClockSyncBytes - 1)) + kClockSyncBytes;
    uint8_t* q = p + 8;
    memcpy(q, &now, 8);
    q += 8;
    if (has_range_id) {
      memcpy(q, &range_id, 8);
      q += 8;
    }
    if (has_cc) {
      uint32_t cc[2] = {ev.color, ev.category};
      memcpy(q, cc, 8);
      q += 8;
    }
    if (NVTXREC_UNLIKELY(block != nullptr)) {
      const uint64_t len = block_len;
      memcpy(q, &len, 8);
      if (block_len) memcpy(q + 8, block, block_len);
    } else if (has_payload) {
      memcpy(q, &ev.payload, 8);
    }
    Commit(ts, p, MakeWord0(kind, flags, domain, msg), n);
    CountEvent(ts);
    return true;
  }
  CountDrop();
  return false;
}

inline int32_t& Depth(ThreadState* ts, uint16_t domain) { return ts->depth[domain]; }

inline uint64_t NextRangeId(ThreadState* ts) { return ts->range_hi | (++ts->range_counter & kRangeCounterMask); }

// ---- gated implementations: a capture range or a domain filter is set (gate.h), or the
// thread still has open push/pop ranges that were not written (skipped_open). Every
// clock read here is ordered: whether an event is inside a window depends on other
// threads. ----

__attribute__((noinline)) int GatedPush(ThreadState* ts, uint16_t domain, const Event& ev) {
  int32_t& d = Depth(ts, domain);
  if (DomainDisabled(domain)) return d++;
  uint64_t now = 0;
  bool write = true;
  if (CaptureRangeSet()) {
    const WindowOpener opener{ts->serial + 1, domain, d, 0, ev.msg_kind, ev.msg};
    write = DecideWritten(ts, &now, &opener);
  } else {
    now = NowNsOrdered(ts);
  }
  // A skipped push whose fate cannot be kept (no memory for its bit) is written instead.
  if (!write && !MarkUnwritten(ts, domain, d, kSkipped)) {
    write = true;
    now = NowNsOrdered(ts);
  }
  if (write && !Record(ts, kRangePush, domain, ev, now, false, 0)) MarkUnwritten(ts, domain, d, kDropped);
  return d++;
}

__attribute__((noinline)) int GatedPop(ThreadState* ts, uint16_t domain) {
  int32_t& d = Depth(ts, domain);
  if (!DomainDisabled(domain)) {
    const int32_t top = d - 1;
    bool write;
    uint64_t now = 0;
    if (top >= 0) {
      const Unwritten fate = TakeUnwritten(ts, domain, top);
      write = fate == kWritten;
      if (fate == kDropped) CountDrop();  // the pop of a dropped push is lost with it
      if (CaptureRangeSet()) ClosePushWindowIfOpener(ts->serial + 1, domain, top);
      now = NowNsOrdered(ts);
    } else {
      // A pop without push (recorded as an error, as on the ungated path): written
      // when a push now would be.
      // (the gate read once: set between two reads, the pop would be written without a time)
      const bool capture = CaptureRangeSet();
      write = !capture || DecideWritten(ts, &now, nullptr);
      if (!capture) now = NowNsOrdered(ts);
    }
    if (write) Record(ts, kRangePop, domain, Event(), now, false, 0);
  }
  if (d <= 0) return -1;
  return --d;
}

__attribute__((noinline)) nvtxRangeId_t GatedStart(ThreadState* ts, uint16_t domain, const Event& ev) {
  uint64_t id = NextRangeId(ts);
  if (DomainDisabled(domain)) return id | kSkippedRangeBit;
  uint64_t now = 0;
  if (CaptureRangeSet()) {
    const WindowOpener opener{ts->serial + 1, domain, 0, id, ev.msg_kind, ev.msg};
    if (!DecideWritten(ts, &now, &opener)) return id | kSkippedRangeBit;
  } else {
    now = NowNsOrdered(ts);
  }
  return Record(ts, kRangeStart, domain, ev, now, true, id) ? id : id | kUnwrittenRangeBits;
}

__attribute__((noinline)) void GatedEnd(ThreadState* ts, uint16_t domain, nvtxRangeId_t id) {
  if (DomainDisabled(domain)) return;
  if (id & kSkippedRangeBit) {
    if (id & kDroppedRangeBit) CountDrop();  // the end of a dropped start is lost with it
    return;
  }
  if (CaptureRangeSet()) CloseStartWindowIfOpener(id);
  Record(ts, kRangeEnd, domain, Event(), NowNsOrdered(ts), true, id);
}

__attribute__((noinline)) void GatedMark(ThreadState* ts, uint16_t domain, const Event& ev) {
  if (DomainDisabled(domain)) return;
  uint64_t now = 0;
  if (CaptureRangeSet()) {
    if (!DecideWritten(ts, &now, nullptr)) return;
  } else {
    now = NowNsOrdered(ts);
  }
  Record(ts, kMark, domain, ev, now, false, 0);
}

// ---- generic implementations ----
// Push/pop stamp with the plain clock read (a thread's own nesting); start, end and mark
// with the ordered one (a range id or a mark may follow another thread's event).

int PushImpl(uint16_t domain, const Event& ev) {
  EntryGuard guard;
  ThreadState* ts = guard.ts();
  if (!ts) {
    CountDrop();
    return NVTX_NO_PUSH_POP_TRACKING;
  }
  if (GateActive() || ts->skipped_open) return GatedPush(ts, domain, ev);
  uint64_t now = NowNs(ts);
  int32_t& d = Depth(ts, domain);
  // A push that could not be written (counted as dropped): its pop is not written either.
  if (NVTXREC_UNLIKELY(!Record(ts, kRangePush, domain, ev, now, false, 0))) MarkUnwritten(ts, domain, d, kDropped);
  return d++;
}

int PopImpl(uint16_t domain) {
  EntryGuard guard;
  ThreadState* ts = guard.ts();
  if (!ts) {
    CountDrop();
    return NVTX_NO_PUSH_POP_TRACKING;
  }
  if (GateActive() || ts->skipped_open) return GatedPop(ts, domain);
  uint64_t now = NowNs(ts);
  Record(ts, kRangePop, domain, Event(), now, false, 0);
  int32_t& d = Depth(ts, domain);
  if (d <= 0) return -1;  // pop without push: recorded, reported as an error
  return --d;
}

nvtxRangeId_t StartImpl(uint16_t domain, const Event& ev) {
  EntryGuard guard;
  ThreadState* ts = guard.ts();
  if (!ts) {
    CountDrop();
    return FallbackRangeId();
  }
  if (GateActive()) return GatedStart(ts, domain, ev);
  uint64_t now = NowNsOrdered(ts);
  uint64_t id = NextRangeId(ts);
  // A start that could not be written (counted as dropped): its end is not written either.
  return NVTXREC_LIKELY(Record(ts, kRangeStart, domain, ev, now, true, id)) ? id : id | kUnwrittenRangeBits;
}

void EndImpl(uint16_t domain, nvtxRangeId_t id) {
  EntryGuard guard;
  ThreadState* ts = guard.ts();
  if (!ts) {
    if ((id & kUnwrittenRangeBits) != kSkippedRangeBit) CountDrop();  // only a skipped start's end is not lost
    return;
  }
  if (GateActive()) return GatedEnd(ts, domain, id);
  if (NVTXREC_UNLIKELY(id & kSkippedRangeBit)) {  // its start was not written (decided at the start)
    if (id & kDroppedRangeBit) CountDrop();
    return;
  }
  uint64_t now = NowNsOrdered(ts);
  Record(ts, kRangeEnd, domain, Event(), now, true, id);
}

void MarkImpl(uint16_t domain, const Event& ev) {
  EntryGuard guard;
  ThreadState* ts = guard.ts();
  if (!ts) {
    CountDrop();
    return;
  }
  if (GateActive()) return GatedMark(ts, domain, ev);
  uint64_t now = NowNsOrdered(ts);
  Record(ts, kMark, domain, ev, now, false, 0);
}

inline Event AsciiEvent(const char* m) {
  Event ev;
  if (m) {
    ev.msg_kind = kMsgAscii;
    ev.msg = m;
  }
  return ev;
}

inline Event UnicodeEvent(const wchar_t* m) {
  Event ev;
  if (m) {
    ev.msg_kind = kMsgUnicode;
    ev.msg = m;
  }
  return ev;
}

inline Event AttrEvent(const nvtxEventAttributes_t* a) {
  Event ev;
  ParseAttributes(a, &ev);
  return ev;
}

inline size_t SafeLen(const char* s) { return s ? strlen(s) : 0; }

// ---- NVTX_CB_MODULE_CORE ----

void NVTX_API MarkEx(const nvtxEventAttributes_t* a) { MarkImpl(0, AttrEvent(a)); }
void NVTX_API MarkA(const char* m) { MarkImpl(0, AsciiEvent(m)); }
void NVTX_API MarkW(const wchar_t* m) { MarkImpl(0, UnicodeEvent(m)); }
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) { return StartImpl(0, AttrEvent(a)); }
nvtxRangeId_t NVTX_API RangeStartA(const char* m) { return StartImpl(0, AsciiEvent(m)); }
nvtxRangeId_t NVTX_API RangeStartW(const wchar_t* m) { return StartImpl(0, UnicodeEvent(m)); }
void NVTX_API RangeEnd(nvtxRangeId_t id) { EndImpl(0, id); }
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) { return PushImpl(0, AttrEvent(a)); }
int NVTX_API RangePushA(const char* m) { return PushImpl(0, AsciiEvent(m)); }
int NVTX_API RangePushW(const wchar_t* m) { return PushImpl(0, UnicodeEvent(m)); }
int NVTX_API RangePop(void) { return PopImpl(0); }

void NVTX_API NameCategoryA(uint32_t category, const char* name) {
  NVTXREC_REGISTRATION();
  NameCategory(0, category, name, SafeLen(name));
}
void NVTX_API NameCategoryW(uint32_t category, const wchar_t* name) {
  NVTXREC_REGISTRATION();
  std::string s = Utf32ToUtf8String(name, MaxStringBytes());
  NameCategory(0, category, s.data(), s.size());
}
void NVTX_API NameOsThreadA(uint32_t tid, const char* name) {
  NVTXREC_REGISTRATION();
  NameOsThread(tid, name, SafeLen(name));
}
void NVTX_API NameOsThreadW(uint32_t tid, const wchar_t* name) {
  NVTXREC_REGISTRATION();
  std::string s = Utf32ToUtf8String(name, MaxStringBytes());
  NameOsThread(tid, s.data(), s.size());
}

// ---- NVTX_CB_MODULE_CORE2 ----

void NVTX_API DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  MarkImpl(DomainId(d), AttrEvent(a));
}
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return StartImpl(DomainId(d), AttrEvent(a));
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { EndImpl(DomainId(d), id); }
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return PushImpl(DomainId(d), AttrEvent(a));
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t d) { return PopImpl(DomainId(d)); }

std::atomic<uintptr_t> g_resource_handles{1};
nvtxResourceHandle_t NVTX_API DomainResourceCreate(nvtxDomainHandle_t, nvtxResourceAttributes_t*) {
  // Resources are not recorded; hand out distinct non-null opaque handles.
  return reinterpret_cast<nvtxResourceHandle_t>(g_resource_handles.fetch_add(1) << 4);
}
void NVTX_API DomainResourceDestroy(nvtxResourceHandle_t) {}

void NVTX_API DomainNameCategoryA(nvtxDomainHandle_t d, uint32_t category, const char* name) {
  NVTXREC_REGISTRATION();
  if (DomainId(d) == kDisabledDomain) return;
  NameCategory(DomainId(d), category, name, SafeLen(name));
}
void NVTX_API DomainNameCategoryW(nvtxDomainHandle_t d, uint32_t category, const wchar_t* name) {
  NVTXREC_REGISTRATION();
  if (DomainId(d) == kDisabledDomain) return;
  std::string s = Utf32ToUtf8String(name, MaxStringBytes());
  NameCategory(DomainId(d), category, s.data(), s.size());
}
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t d, const char* s) {
  NVTXREC_REGISTRATION(reinterpret_cast<nvtxStringHandle_t>(uintptr_t(AllocLastingStringId())));
  if (DomainId(d) == kDisabledDomain) return reinterpret_cast<nvtxStringHandle_t>(uintptr_t(AllocLastingStringId()));
  uint32_t id = RegisterString(DomainId(d), s, SafeLen(s));
  return reinterpret_cast<nvtxStringHandle_t>(uintptr_t(id));
}
nvtxStringHandle_t NVTX_API DomainRegisterStringW(nvtxDomainHandle_t d, const wchar_t* s) {
  NVTXREC_REGISTRATION(reinterpret_cast<nvtxStringHandle_t>(uintptr_t(AllocLastingStringId())));
  if (DomainId(d) == kDisabledDomain) return reinterpret_cast<nvtxStringHandle_t>(uintptr_t(AllocLastingStringId()));
  std::string u = Utf32ToUtf8String(s, MaxStringBytes());
  uint32_t id = RegisterString(DomainId(d), u.data(), u.size());
  return reinterpret_cast<nvtxStringHandle_t>(uintptr_t(id));
}
// An excluded domain (gate.h): no handle when the default domain is excluded too (a null
// handle is the default domain, whose events are dropped), else the disabled handle.
nvtxDomainHandle_t CreateDomainHandle(const char* name, size_t len) {
  if (GateActive() && DomainNameExcluded(name ? name : "", name ? len : 0)) {
    return DefaultDomainExcluded() ? nullptr : DomainHandle(kDisabledDomain);
  }
  return DomainHandle(CreateDomain(name, len));
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  NVTXREC_REGISTRATION(nullptr);
  return CreateDomainHandle(name, SafeLen(name));
}
nvtxDomainHandle_t NVTX_API DomainCreateW(const wchar_t* name) {
  NVTXREC_REGISTRATION(nullptr);
  std::string u = Utf32ToUtf8String(name, MaxStringBytes());
  return CreateDomainHandle(u.data(), u.size());
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t d) {
  NVTXREC_REGISTRATION();
  uint16_t id = DomainId(d);
  if (id && id != kDisabledDomain) DestroyDomain(id);
}
void NVTX_API Initialize(const void*) {}

template <typename F>
inline void Set(NvtxFunctionTable table, unsigned int size, unsigned int id, F fn) {
  if (id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

uint8_t NVTX_API DomainIsEnabled(nvtxDomainHandle_t d) { return GateActive() && DomainDisabled(DomainId(d)) ? 0 : 1; }

// ---- payload extension: the nvtx*Payload calls (no message; payloads on begins only) ----

namespace {
inline Event PayloadEvent(const void* data, size_t count) {
  Event ev;
  if (data && count) {
    ev.ext = data;
    ev.ext_count = int32_t(count < kMaxPayloadsPerEvent ? count : kMaxPayloadsPerEvent);
  }
  return ev;
}
}  // namespace

void NVTX_API MarkPayload(nvtxDomainHandle_t d, const void* data, size_t count) {
  MarkImpl(DomainId(d), PayloadEvent(data, count));
}
int NVTX_API RangePushPayload(nvtxDomainHandle_t d, const void* data, size_t count) {
  return PushImpl(DomainId(d), PayloadEvent(data, count));
}
int NVTX_API RangePopPayload(nvtxDomainHandle_t d, const void*, size_t) { return PopImpl(DomainId(d)); }
nvtxRangeId_t NVTX_API RangeStartPayload(nvtxDomainHandle_t d, const void* data, size_t count) {
  return StartImpl(DomainId(d), PayloadEvent(data, count));
}
void NVTX_API RangeEndPayload(nvtxDomainHandle_t d, nvtxRangeId_t id, const void*, size_t) { EndImpl(DomainId(d), id); }

void InstallCoreCallbacks(NvtxFunctionTable t, unsigned int n) {
  Set(t, n, NVTX_CBID_CORE_MarkEx, MarkEx);
  Set(t, n, NVTX_CBID_CORE_MarkA, MarkA);
  Set(t, n, NVTX_CBID_CORE_MarkW, MarkW);
  Set(t, n, NVTX_CBID_CORE_RangeStartEx, RangeStartEx);
  Set(t, n, NVTX_CBID_CORE_RangeStartA, RangeStartA);
  Set(t, n, NVTX_CBID_CORE_RangeStartW, RangeStartW);
  Set(t, n, NVTX_CBID_CORE_RangeEnd, RangeEnd);
  Set(t, n, NVTX_CBID_CORE_RangePushEx, RangePushEx);
  Set(t, n, NVTX_CBID_CORE_RangePushA, RangePushA);
  Set(t, n, NVTX_CBID_CORE_RangePushW, RangePushW);
  Set(t, n, NVTX_CBID_CORE_RangePop, RangePop);
  Set(t, n, NVTX_CBID_CORE_NameCategoryA, NameCategoryA);
  Set(t, n, NVTX_CBID_CORE_NameCategoryW, NameCategoryW);
  Set(t, n, NVTX_CBID_CORE_NameOsThreadA, NameOsThreadA);
  Set(t, n, NVTX_CBID_CORE_NameOsThreadW, NameOsThreadW);
}

void InstallCore2Callbacks(NvtxFunctionTable t, unsigned int n) {
  Set(t, n, NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd);
  Set(t, n, NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx);
  Set(t, n, NVTX_CBID_CORE2_DomainRangePop, DomainRangePop);
  Set(t, n, NVTX_CBID_CORE2_DomainResourceCreate, DomainResourceCreate);
  Set(t, n, NVTX_CBID_CORE2_DomainResourceDestroy, DomainResourceDestroy);
  Set(t, n, NVTX_CBID_CORE2_DomainNameCategoryA, DomainNameCategoryA);
  Set(t, n, NVTX_CBID_CORE2_DomainNameCategoryW, DomainNameCategoryW);
  Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, DomainRegisterStringA);
  Set(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, DomainRegisterStringW);
  Set(t, n, NVTX_CBID_CORE2_DomainCreateA, DomainCreateA);
  Set(t, n, NVTX_CBID_CORE2_DomainCreateW, DomainCreateW);
  Set(t, n, NVTX_CBID_CORE2_DomainDestroy, DomainDestroy);
  Set(t, n, NVTX_CBID_CORE2_Initialize, Initialize);
}

}  // namespace nvtx_recorder
