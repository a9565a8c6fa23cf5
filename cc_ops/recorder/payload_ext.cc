// The NVTX payload extension (see payload_ext.h and format/record_format.h).
#include "recorder/payload_ext.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "recorder/os_util.h"

// After callbacks.h (NVTX_NO_IMPL, through payload_ext.h): types and ids only.
#include <nvtx3/nvToolsExtPayload.h>

namespace nvtx_recorder {

using namespace nvtx_record;

namespace {

constexpr uint64_t kUnknown = ~uint64_t(0);
constexpr size_t kMaxEntries = 1024;     // entries kept per schema
constexpr size_t kMaxNameBytes = 256;    // schema, entry and enum value names
constexpr size_t kMaxSchemas = 65536;    // registry bound (per process)
constexpr size_t kMaxStringFields = 64;  // pointer strings copied per payload
constexpr uint64_t kStaticIdStart = uint64_t(1) << 24;

struct SchemaInfo {
  uint64_t size = 0;  // 0 = unknown
  uint64_t align = 1;
  std::vector<uint64_t> string_ptrs;  // offsets of pointer C-string fields (nested included)
};

// Guarded by RecorderMutex() (held across fork by thread_lifetime.cc's handlers).
std::map<std::pair<uint16_t, uint64_t>, SchemaInfo>* g_schemas = nullptr;  // never freed
uint64_t g_next_dynamic_id = NVTX_PAYLOAD_SCHEMA_ID_DYNAMIC_START;

inline uint16_t DomainOf(nvtxDomainHandle_t h) {
  uintptr_t v = reinterpret_cast<uintptr_t>(h);
  return v <= 0xFFFF ? uint16_t(v) : 0;
}

inline uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

size_t NameLen(const char* s) { return s ? strnlen(s, kMaxNameBytes) : 0; }

// Size and alignment of a predefined entry type on x86_64 (0: unknown or variable).
void TypeInfo(uint64_t t, uint64_t* size, uint64_t* align) {
  uint64_t s = 0;
  switch (t) {
    case NVTX_PAYLOAD_ENTRY_TYPE_CHAR:
    case NVTX_PAYLOAD_ENTRY_TYPE_UCHAR:
    case NVTX_PAYLOAD_ENTRY_TYPE_INT8:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT8:
    case NVTX_PAYLOAD_ENTRY_TYPE_CHAR8:
    case NVTX_PAYLOAD_ENTRY_TYPE_BYTE:
      s = 1;
      break;
    case NVTX_PAYLOAD_ENTRY_TYPE_SHORT:
    case NVTX_PAYLOAD_ENTRY_TYPE_USHORT:
    case NVTX_PAYLOAD_ENTRY_TYPE_INT16:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT16:
    case NVTX_PAYLOAD_ENTRY_TYPE_CHAR16:
    case NVTX_PAYLOAD_ENTRY_TYPE_FLOAT16:
    case NVTX_PAYLOAD_ENTRY_TYPE_BF16:
      s = 2;
      break;
    case NVTX_PAYLOAD_ENTRY_TYPE_INT:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT:
    case NVTX_PAYLOAD_ENTRY_TYPE_INT32:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT32:
    case NVTX_PAYLOAD_ENTRY_TYPE_FLOAT:
    case NVTX_PAYLOAD_ENTRY_TYPE_FLOAT32:
    case NVTX_PAYLOAD_ENTRY_TYPE_WCHAR:
    case NVTX_PAYLOAD_ENTRY_TYPE_CHAR32:
    case NVTX_PAYLOAD_ENTRY_TYPE_TF32:
    case NVTX_PAYLOAD_ENTRY_TYPE_CATEGORY:
    case NVTX_PAYLOAD_ENTRY_TYPE_COLOR_ARGB:
    case NVTX_PAYLOAD_ENTRY_TYPE_PID_UINT32:
    case NVTX_PAYLOAD_ENTRY_TYPE_TID_UINT32:
      s = 4;
      break;
    case NVTX_PAYLOAD_ENTRY_TYPE_LONG:
    case NVTX_PAYLOAD_ENTRY_TYPE_ULONG:
    case NVTX_PAYLOAD_ENTRY_TYPE_LONGLONG:
    case NVTX_PAYLOAD_ENTRY_TYPE_ULONGLONG:
    case NVTX_PAYLOAD_ENTRY_TYPE_INT64:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT64:
    case NVTX_PAYLOAD_ENTRY_TYPE_DOUBLE:
    case NVTX_PAYLOAD_ENTRY_TYPE_FLOAT64:
    case NVTX_PAYLOAD_ENTRY_TYPE_SIZE:
    case NVTX_PAYLOAD_ENTRY_TYPE_ADDRESS:
    case NVTX_PAYLOAD_ENTRY_TYPE_RANGE_ID:
    case NVTX_PAYLOAD_ENTRY_TYPE_SCOPE_ID:
    case NVTX_PAYLOAD_ENTRY_TYPE_PID_UINT64:
    case NVTX_PAYLOAD_ENTRY_TYPE_TID_UINT64:
    case NVTX_PAYLOAD_ENTRY_TYPE_NVTX_REGISTERED_STRING_HANDLE:
      s = 8;
      break;
    case NVTX_PAYLOAD_ENTRY_TYPE_LONGDOUBLE:
    case NVTX_PAYLOAD_ENTRY_TYPE_INT128:
    case NVTX_PAYLOAD_ENTRY_TYPE_UINT128:
    case NVTX_PAYLOAD_ENTRY_TYPE_FLOAT128:
      s = 16;
      break;
    default:
      break;
  }
  *size = s;
  *align = s ? s : 1;
}

bool IsStringType(uint64_t t) {
  return t >= NVTX_PAYLOAD_ENTRY_TYPE_CSTRING && t <= NVTX_PAYLOAD_ENTRY_TYPE_CSTRING_UTF32;
}
uint64_t StringUnit(uint64_t t) {
  return t == NVTX_PAYLOAD_ENTRY_TYPE_CSTRING_UTF16 ? 2 : t == NVTX_PAYLOAD_ENTRY_TYPE_CSTRING_UTF32 ? 4 : 1;
}

// Writes one kPayloadSchema record (the registering thread, inside its EntryGuard;
// dropped when there is no space or no thread state).
void WriteSchemaRecord(uint16_t domain, const std::string& body) {
  ThreadState* ts = t_state;
  if (!ts || body.size() > MaxStringBytes()) {
    CountDrop();
    return;
  }
  uint32_t padded = uint32_t(Pad8(body.size()));
  uint32_t n = 16 + padded;
  uint8_t* p = Reserve(ts, n);
  if (p) {
    uint32_t hdr[2] = {uint32_t(body.size()), 0};
    memcpy(p + 8, hdr, 8);
    memcpy(p + 16, body.data(), body.size());
    if (padded != body.size()) memset(p + 16 + body.size(), 0, padded - body.size());
    Commit(ts, p, MakeWord0(kPayloadSchema, 0, domain, 0), n);
  } else {
    CountDrop();
  }
}

void AppendName(std::string* out, const char* s) {
  size_t len = NameLen(s);
  if (len) out->append(s, len);
  out->append(Pad8(len) - len, '\0');
}

template <typename T>
void AppendPod(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

uint64_t AssignId(uint16_t domain, uint64_t wanted) {
  if (wanted >= kStaticIdStart) return wanted;
  (void)domain;
  return g_next_dynamic_id++;
}

// Reads up to `cap` bytes of a C string at `src` without trusting the pointer: a bad
// address ends the read. Returns the bytes read; *terminated when a NUL was found.
size_t SafeReadString(const void* src, char* buf, size_t cap, bool* terminated) {
  *terminated = false;
  if (!src || cap == 0) return 0;
  ErrnoGuard keep_errno;  // (a bad address: EFAULT)
  uintptr_t a = reinterpret_cast<uintptr_t>(src);
  static const uintptr_t kPage = uintptr_t(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  size_t first = std::min<size_t>(cap, kPage - (a % kPage));  // no iovec crosses a page
  struct iovec local[2] = {{buf, first}, {buf + first, cap - first}};
  struct iovec remote[2] = {{const_cast<void*>(src), first}, {reinterpret_cast<void*>(a + first), cap - first}};
  ssize_t got = process_vm_readv(getpid(), local, cap > first ? 2 : 1, remote, cap > first ? 2 : 1, 0);
  if (got <= 0) return 0;
  size_t len = strnlen(buf, size_t(got));
  *terminated = len < size_t(got);
  return len;
}

}  // namespace

uint64_t NVTX_API PayloadSchemaRegister(nvtxDomainHandle_t domain_handle, const void* attr_ptr) {
  NVTXREC_REGISTRATION(0);
  const auto* attr = static_cast<const nvtxPayloadSchemaAttr_t*>(attr_ptr);
  if (!attr) return 0;
  const uint16_t domain = DomainOf(domain_handle);
  const uint64_t mask = attr->fieldMask;
  const char* name = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NAME) ? attr->name : nullptr;
  const uint64_t type = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_TYPE) ? attr->type : 0;
  const uint64_t flags = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_FLAGS) ? attr->flags : 0;
  const nvtxPayloadSchemaEntry_t* entries = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ENTRIES) ? attr->entries : nullptr;
  size_t num = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NUM_ENTRIES) ? attr->numEntries : 0;
  if (!entries) num = 0;
  if (num > kMaxEntries) num = kMaxEntries;
  const uint64_t given_size = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_STATIC_SIZE) ? attr->payloadStaticSize : 0;
  const uint64_t pack = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ALIGNMENT) ? attr->packAlign : 0;
  const uint64_t wanted = (mask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID) ? attr->schemaId : 0;

  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (!g_schemas) g_schemas = new std::map<std::pair<uint16_t, uint64_t>, SchemaInfo>();
  const uint64_t id = AssignId(domain, wanted);
  SchemaInfo info;
  std::string body;
  std::string entry_bytes;
  uint64_t cursor = 0;  // kUnknown once an implicit offset cannot be computed
  uint64_t max_align = 1;
  const bool is_union =
      type == NVTX_PAYLOAD_SCHEMA_TYPE_UNION || type == NVTX_PAYLOAD_SCHEMA_TYPE_UNION_WITH_INTERNAL_SELECTOR;
  for (size_t i = 0; i < num; ++i) {
    const nvtxPayloadSchemaEntry_t& e = entries[i];
    uint64_t elem = 0, align = 1;
    bool ptr_string = false;
    const uint64_t array = NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_TYPE(e.flags);
    if (e.flags & NVTX_PAYLOAD_ENTRY_FLAG_POINTER) {
      elem = align = 8;
    } else if (IsStringType(e.type)) {
      uint64_t unit = StringUnit(e.type);
      if (array == 0 || array == NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_FIXED_SIZE) {
        if (e.arrayOrUnionDetail > 0 && e.arrayOrUnionDetail < (uint64_t(1) << 32)) {
          elem = e.arrayOrUnionDetail * unit;  // inline fixed-length string
          align = unit;
        } else {
          elem = align = 8;  // pointer to a zero-terminated string
          ptr_string = unit == 1;
        }
      }
    } else if (e.type >= kStaticIdStart) {
      auto it = g_schemas->find({domain, e.type});
      if (it != g_schemas->end()) {
        elem = it->second.size;
        align = it->second.align;
      }
    } else {
      TypeInfo(e.type, &elem, &align);
    }
    uint64_t total = elem;
    if (!IsStringType(e.type) && array == NVTX_PAYLOAD_ENTRY_FLAG_ARRAY_FIXED_SIZE) {
      total = e.arrayOrUnionDetail < (uint64_t(1) << 32) ? elem * e.arrayOrUnionDetail : 0;
    } else if (!IsStringType(e.type) && array != 0) {
      total = 0;  // variable-length array: size known only per payload
    }
    if (pack && align > pack) align = pack;
    if (align == 0 || (align & (align - 1))) align = 1;
    uint64_t offset;
    if (is_union) {
      offset = 0;
    } else if (i == 0 || e.offset != 0) {
      offset = e.offset;
    } else if (cursor == kUnknown) {
      offset = kUnknown;
    } else {
      offset = (cursor + align - 1) & ~(align - 1);
    }
    if (offset != kUnknown && total != 0 && offset < (uint64_t(1) << 40)) {
      cursor = std::max(is_union ? 0 : cursor == kUnknown ? 0 : cursor, offset + total);
    } else if (!is_union) {
      cursor = kUnknown;
    }
    if (align > max_align) max_align = align;
    if (offset != kUnknown && info.string_ptrs.size() < kMaxStringFields) {
      if (ptr_string) info.string_ptrs.push_back(offset);
      if (e.type >= kStaticIdStart && total == elem && elem != 0) {
        auto it = g_schemas->find({domain, e.type});
        if (it != g_schemas->end()) {
          for (uint64_t o : it->second.string_ptrs) {
            if (info.string_ptrs.size() < kMaxStringFields) info.string_ptrs.push_back(offset + o);
          }
        }
      }
    }
    PayloadSchemaEntryDef d{};
    d.flags = e.flags;
    d.type = e.type;
    d.detail = e.arrayOrUnionDetail;
    d.offset = offset;
    d.size = total;
    d.name_len = uint32_t(NameLen(e.name));
    AppendPod(&entry_bytes, d);
    AppendName(&entry_bytes, e.name);
  }
  uint64_t size = given_size;
  if (!size && cursor != kUnknown && type == NVTX_PAYLOAD_SCHEMA_TYPE_STATIC) {
    size = (cursor + max_align - 1) & ~(max_align - 1);
  }
  info.size = (type == NVTX_PAYLOAD_SCHEMA_TYPE_STATIC || is_union) ? size : 0;
  info.align = max_align;
  PayloadSchemaDef def{};
  def.schema_id = id;
  def.schema_type = type;
  def.flags = flags;
  def.static_size = size;
  def.num_entries = uint32_t(num);
  def.name_len = uint32_t(NameLen(name));
  AppendPod(&body, def);
  AppendName(&body, name);
  body += entry_bytes;
  if (g_schemas->size() < kMaxSchemas) (*g_schemas)[{domain, id}] = std::move(info);
  WriteSchemaRecord(domain, body);
  return id;
}

uint64_t NVTX_API PayloadEnumRegister(nvtxDomainHandle_t domain_handle, const void* attr_ptr) {
  NVTXREC_REGISTRATION(0);
  const auto* attr = static_cast<const nvtxPayloadEnumAttr_t*>(attr_ptr);
  if (!attr) return 0;
  const uint16_t domain = DomainOf(domain_handle);
  const uint64_t mask = attr->fieldMask;
  const char* name = (mask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_NAME) ? attr->name : nullptr;
  const nvtxPayloadEnum_t* entries = (mask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_ENTRIES) ? attr->entries : nullptr;
  size_t num = (mask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_NUM_ENTRIES) ? attr->numEntries : 0;
  if (!entries) num = 0;
  if (num > kMaxEntries) num = kMaxEntries;
  uint64_t size = (mask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_SIZE) ? attr->sizeOfEnum : 4;
  if (size != 1 && size != 2 && size != 4 && size != 8) size = 0;
  const uint64_t wanted = (mask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_SCHEMA_ID) ? attr->schemaId : 0;
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (!g_schemas) g_schemas = new std::map<std::pair<uint16_t, uint64_t>, SchemaInfo>();
  const uint64_t id = AssignId(domain, wanted);
  SchemaInfo info;
  info.size = size;
  info.align = size ? size : 1;
  std::string body;
  PayloadSchemaDef def{};
  def.schema_id = id;
  def.schema_type = kPayloadDefEnum;
  def.flags = size;
  def.static_size = size;
  def.num_entries = uint32_t(num);
  def.name_len = uint32_t(NameLen(name));
  AppendPod(&body, def);
  AppendName(&body, name);
  for (size_t i = 0; i < num; ++i) {
    PayloadSchemaEntryDef d{};
    d.flags = entries[i].isFlag ? 1 : 0;
    d.detail = entries[i].value;
    d.name_len = uint32_t(NameLen(entries[i].name));
    AppendPod(&body, d);
    AppendName(&body, entries[i].name);
  }
  if (g_schemas->size() < kMaxSchemas) (*g_schemas)[{domain, id}] = std::move(info);
  WriteSchemaRecord(domain, body);
  return id;
}

uint32_t BuildPayloadBlock(uint16_t domain, const void* data, int32_t count, const uint8_t** out) {
  // One per thread, kMaxExtPayloadBytes, never freed; mapped, not malloc'ed (os_util.h).
  static __thread uint8_t* t_buf = nullptr;
  if (!t_buf) t_buf = static_cast<uint8_t*>(MapZeroed(kMaxExtPayloadBytes));
  if (!t_buf) return 0;
  *out = t_buf;
  uint32_t cap = kMaxExtPayloadBytes;
  if (MaxStringBytes() < cap + kMaxEventRecordBytes) cap = (MaxStringBytes() - kMaxEventRecordBytes) & ~7u;
  const auto* pd = static_cast<const nvtxPayloadData_t*>(data);
  uint32_t n = count > 0 ? uint32_t(count) : 0;
  if (!pd) n = 0;
  if (n > kMaxPayloadsPerEvent) n = kMaxPayloadsPerEvent;
  uint32_t pos = 0;
  // Headers of all data entries are always kept (24 bytes each); bytes share the rest.
  uint32_t budget = cap > n * sizeof(PayloadEntryHeader) ? cap - n * uint32_t(sizeof(PayloadEntryHeader)) : 0;
  for (uint32_t i = 0; i < n && pos + sizeof(PayloadEntryHeader) <= cap; ++i) {
    PayloadEntryHeader h{};
    h.key = pd[i].schemaId;
    h.size = pd[i].size;
    h.kind = kPayloadEntryData;
    h.index = uint16_t(i);
    uint64_t want = pd[i].payload ? pd[i].size : 0;
    uint32_t stored = uint32_t(std::min<uint64_t>(want, budget & ~7u));
    h.stored = stored;
    memcpy(t_buf + pos, &h, sizeof(h));
    pos += sizeof(h);
    if (stored) memcpy(t_buf + pos, pd[i].payload, stored);
    uint32_t padded = uint32_t(Pad8(stored));
    memset(t_buf + pos + stored, 0, padded - stored);
    pos += padded;
    budget -= padded;
  }
  // Pointer C strings of registered schemas, copied safely, with what space is left.
  // (under the recorder mutex while the schema's offsets are read: no copy, no malloc)
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  for (uint32_t i = 0; i < n && g_schemas; ++i) {
    auto it = g_schemas->find({domain, pd[i].schemaId});
    if (it == g_schemas->end()) continue;
    for (uint64_t off : it->second.string_ptrs) {
      if (!pd[i].payload || off + 8 > pd[i].size) continue;
      if (pos + sizeof(PayloadEntryHeader) + 8 > cap) break;
      const void* str;
      memcpy(&str, static_cast<const uint8_t*>(pd[i].payload) + off, 8);
      size_t room = std::min<size_t>(kMaxPayloadStringBytes, (cap - pos - sizeof(PayloadEntryHeader)) & ~size_t(7));
      char* dst = reinterpret_cast<char*>(t_buf + pos + sizeof(PayloadEntryHeader));
      bool terminated = false;
      size_t len = str ? SafeReadString(str, dst, room, &terminated) : 0;
      PayloadEntryHeader h{};
      h.key = off;
      h.size = (terminated || !str) ? len : ~uint64_t(0);
      h.stored = uint32_t(len);
      h.kind = kPayloadEntryString;
      h.index = uint16_t(i);
      if (!str || (len == 0 && !terminated)) h.size = ~uint64_t(0) - 1;  // null or unreadable
      memcpy(t_buf + pos, &h, sizeof(h));
      pos += sizeof(h);
      uint32_t padded = uint32_t(Pad8(len));
      memset(t_buf + pos + len, 0, padded - len);
      pos += padded;
    }
  }
  return pos;
}

}  // namespace nvtx_recorder
