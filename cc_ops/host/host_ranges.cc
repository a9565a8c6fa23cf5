// libnvtx_host.so: host-side NVTX ranges for Python (NVTXCallback, NVTXHook), through the
// NVTX v3 C API itself. Bound with ctypes by nvtx_plugins_tf/_host_ranges.py, which owns
// the caches (domains, registered strings, categories); these functions only build an
// nvtxEventAttributes_t and make one NVTX call each. No TensorFlow, no Python headers.
//
// Why not the `nvtx` Python package: it emits nothing in a domain for which the attached
// tool does not answer nvtxDomainIsEnabled (Nsight Systems 2022.4 does not), so its ranges
// were invisible there. Plain nvtxDomainRangeStartEx & co. reach every NVTX v3 tool.
#include <nvtx3/nvToolsExt.h>

#include <cstddef>
#include <cstdint>

#define NVTX_HOST_API extern "C" __attribute__((visibility("default")))

namespace {

// One event kind, built once by the Python side (per message, color and category) and
// passed by pointer to every start/push/mark: a call then converts two arguments, not seven.
struct HostEvent {
  nvtxDomainHandle_t domain;
  nvtxEventAttributes_t attributes;
};

nvtxEventAttributes_t WithPayload(const HostEvent* event, int64_t payload) {
  nvtxEventAttributes_t a = event->attributes;
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = payload;
  return a;
}

}  // namespace

// Bumped when a signature below changes: the Python side refuses an older library.
NVTX_HOST_API int nvtx_host_abi_version(void) { return 3; }

// Initializes NVTX in this library (loading the tool named by NVTX_INJECTION64_PATH, as
// nsys sets it, if no other library did yet) and says what the tool implements: bit 0 the
// domain start/end ranges, bit 1 the domain push/pop ranges, bit 2 domain marks. 0: no
// tool, every call below is a no-op and the Python side skips them altogether.
NVTX_HOST_API int nvtx_host_tool_attached(void) {
  nvtxInitialize(nullptr);
  const auto& g = NVTX_VERSIONED_IDENTIFIER(nvtxGlobals);
  int bits = 0;
  if (g.nvtxDomainRangeStartEx_impl_fnptr != nullptr && g.nvtxDomainRangeEnd_impl_fnptr != nullptr) bits |= 1;
  if (g.nvtxDomainRangePushEx_impl_fnptr != nullptr && g.nvtxDomainRangePop_impl_fnptr != nullptr) bits |= 2;
  if (g.nvtxDomainMarkEx_impl_fnptr != nullptr) bits |= 4;
  return bits;
}

// nullptr (NVTX's default domain) for a null name.
NVTX_HOST_API void* nvtx_host_domain_create(const char* name) {
  return name == nullptr ? nullptr : static_cast<void*>(nvtxDomainCreateA(name));
}

// nullptr when the tool registers no strings: then the event carries the text itself.
NVTX_HOST_API void* nvtx_host_register_string(void* domain, const char* text) {
  return static_cast<void*>(nvtxDomainRegisterStringA(static_cast<nvtxDomainHandle_t>(domain), text));
}

NVTX_HOST_API void nvtx_host_name_category(void* domain, uint32_t category, const char* name) {
  nvtxDomainNameCategoryA(static_cast<nvtxDomainHandle_t>(domain), category, name);
}

// Size of the caller-owned buffer nvtx_host_event_init fills.
NVTX_HOST_API size_t nvtx_host_event_size(void) { return sizeof(HostEvent); }

// `registered` (from nvtx_host_register_string) if not null, else `ascii`, which must then
// outlive the event. color 0: no color; category 0: none.
NVTX_HOST_API void nvtx_host_event_init(void* event, void* domain, void* registered, const char* ascii, uint32_t color,
                                        uint32_t category) {
  HostEvent e{};
  e.domain = static_cast<nvtxDomainHandle_t>(domain);
  nvtxEventAttributes_t& a = e.attributes;
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  if (color != 0) {
    a.colorType = NVTX_COLOR_ARGB;
    a.color = color;
  }
  if (registered != nullptr) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = static_cast<nvtxStringHandle_t>(registered);
  } else if (ascii != nullptr) {
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = ascii;
  }
  *static_cast<HostEvent*>(event) = e;
}

// The first event of a text: fills `event` with `text` itself as the message (the event
// points at `text`, which must outlive it) and returns nullptr. Not a registered string:
// Nsight Systems exports a registered message only as NVTX_EVENTS.textId, where the old
// nvtx-plugins queries (`WHERE text LIKE 'Train'`) do not look, and the tool would keep
// every per-step name ('step 12345') it was given for the whole run.
NVTX_HOST_API void* nvtx_host_event_new(void* event, void* domain, const char* text, uint32_t color,
                                        uint32_t category) {
  nvtx_host_event_init(event, domain, nullptr, text, color, category);
  return nullptr;
}

// Start/end ranges; the range may end on another thread than the one that started it.
NVTX_HOST_API uint64_t nvtx_host_event_start(const void* event) {
  const auto* e = static_cast<const HostEvent*>(event);
  return nvtxDomainRangeStartEx(e->domain, &e->attributes);
}

NVTX_HOST_API uint64_t nvtx_host_event_start_payload(const void* event, int64_t payload) {
  const auto* e = static_cast<const HostEvent*>(event);
  nvtxEventAttributes_t a = WithPayload(e, payload);
  return nvtxDomainRangeStartEx(e->domain, &a);
}

NVTX_HOST_API void nvtx_host_range_end(void* domain, uint64_t id) {
  nvtxDomainRangeEnd(static_cast<nvtxDomainHandle_t>(domain), id);
}

// Push/pop ranges nest per thread; the return values are NVTX's (the depth, or < 0).
NVTX_HOST_API int nvtx_host_event_push(const void* event) {
  const auto* e = static_cast<const HostEvent*>(event);
  return nvtxDomainRangePushEx(e->domain, &e->attributes);
}

NVTX_HOST_API int nvtx_host_event_push_payload(const void* event, int64_t payload) {
  const auto* e = static_cast<const HostEvent*>(event);
  nvtxEventAttributes_t a = WithPayload(e, payload);
  return nvtxDomainRangePushEx(e->domain, &a);
}

NVTX_HOST_API int nvtx_host_range_pop(void* domain) {
  return nvtxDomainRangePop(static_cast<nvtxDomainHandle_t>(domain));
}

NVTX_HOST_API void nvtx_host_event_mark(const void* event) {
  const auto* e = static_cast<const HostEvent*>(event);
  nvtxDomainMarkEx(e->domain, &e->attributes);
}

NVTX_HOST_API void nvtx_host_event_mark_payload(const void* event, int64_t payload) {
  const auto* e = static_cast<const HostEvent*>(event);
  nvtxEventAttributes_t a = WithPayload(e, payload);
  nvtxDomainMarkEx(e->domain, &a);
}
