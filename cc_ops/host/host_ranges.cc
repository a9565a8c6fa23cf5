// libnvtx_host.so: host-side NVTX ranges for Python (NVTXCallback, NVTXHook), through the
// NVTX v3 C API itself. Bound with ctypes by nvtx_plugins_tf/_host_ranges.py, which owns
// the caches (domains, registered strings, categories); these functions only build an
// nvtxEventAttributes_t and make one NVTX call each. No TensorFlow, no Python headers.
//
// Why not the `nvtx` Python package: it emits nothing in a domain for which the attached
// tool does not answer nvtxDomainIsEnabled (Nsight Systems 2022.4 does not), so its ranges
// were invisible there. Plain nvtxDomainRangeStartEx & co. reach every NVTX v3 tool.
#include <nvtx3/nvToolsExt.h>

#include <cstdint>

#define NVTX_HOST_API extern "C" __attribute__((visibility("default")))

namespace {

// The attributes of one event: a registered string when the tool gave one, else the text.
nvtxEventAttributes_t Attributes(void* registered, const char* ascii, uint32_t color, uint32_t category,
                                 int has_payload, int64_t payload) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  if (color != 0) {
    a.colorType = NVTX_COLOR_ARGB;
    a.color = color;
  }
  if (has_payload) {
    a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
    a.payload.llValue = payload;
  }
  if (registered != nullptr) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = static_cast<nvtxStringHandle_t>(registered);
  } else if (ascii != nullptr) {
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = ascii;
  }
  return a;
}

}  // namespace

// Bumped when a signature below changes: the Python side refuses an older library.
NVTX_HOST_API int nvtx_host_abi_version(void) { return 1; }

// Initializes NVTX in this library (loading the tool named by NVTX_INJECTION64_PATH, or the
// one a profiler such as nsys preloaded) and says what the tool implements: bit 0 the
// domain start/end ranges, bit 1 the domain push/pop ranges. 0: no tool, every call below
// is a no-op and the Python side skips them altogether.
NVTX_HOST_API int nvtx_host_tool_attached(void) {
  nvtxInitialize(nullptr);
  const auto& g = NVTX_VERSIONED_IDENTIFIER(nvtxGlobals);
  int bits = 0;
  if (g.nvtxDomainRangeStartEx_impl_fnptr != nullptr && g.nvtxDomainRangeEnd_impl_fnptr != nullptr) bits |= 1;
  if (g.nvtxDomainRangePushEx_impl_fnptr != nullptr && g.nvtxDomainRangePop_impl_fnptr != nullptr) bits |= 2;
  return bits;
}

// nullptr (NVTX's default domain) for a null name.
NVTX_HOST_API void* nvtx_host_domain_create(const char* name) {
  return name == nullptr ? nullptr : static_cast<void*>(nvtxDomainCreateA(name));
}

// nullptr when the tool registers no strings: then pass the text itself.
NVTX_HOST_API void* nvtx_host_register_string(void* domain, const char* text) {
  return static_cast<void*>(nvtxDomainRegisterStringA(static_cast<nvtxDomainHandle_t>(domain), text));
}

NVTX_HOST_API void nvtx_host_name_category(void* domain, uint32_t category, const char* name) {
  nvtxDomainNameCategoryA(static_cast<nvtxDomainHandle_t>(domain), category, name);
}

// Start/end ranges may end on another thread than the one that started them.
NVTX_HOST_API uint64_t nvtx_host_range_start(void* domain, void* registered, const char* ascii, uint32_t color,
                                             uint32_t category, int has_payload, int64_t payload) {
  nvtxEventAttributes_t a = Attributes(registered, ascii, color, category, has_payload, payload);
  return nvtxDomainRangeStartEx(static_cast<nvtxDomainHandle_t>(domain), &a);
}

NVTX_HOST_API void nvtx_host_range_end(void* domain, uint64_t id) {
  nvtxDomainRangeEnd(static_cast<nvtxDomainHandle_t>(domain), id);
}

// Push/pop ranges nest per thread; the return values are NVTX's (the depth, or < 0).
NVTX_HOST_API int nvtx_host_range_push(void* domain, void* registered, const char* ascii, uint32_t color,
                                       uint32_t category, int has_payload, int64_t payload) {
  nvtxEventAttributes_t a = Attributes(registered, ascii, color, category, has_payload, payload);
  return nvtxDomainRangePushEx(static_cast<nvtxDomainHandle_t>(domain), &a);
}

NVTX_HOST_API int nvtx_host_range_pop(void* domain) {
  return nvtxDomainRangePop(static_cast<nvtxDomainHandle_t>(domain));
}

NVTX_HOST_API void nvtx_host_mark(void* domain, void* registered, const char* ascii, uint32_t color, uint32_t category,
                                  int has_payload, int64_t payload) {
  nvtxEventAttributes_t a = Attributes(registered, ascii, color, category, has_payload, payload);
  nvtxDomainMarkEx(static_cast<nvtxDomainHandle_t>(domain), &a);
}
