#include "reader/payload_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/record_format.h"
#include "reader/record_parse.h"

namespace nvtx_reader {

using namespace nvtx_record;

namespace {

constexpr uint64_t kUnknown = ~uint64_t(0);
constexpr uint64_t kStaticIdStart = uint64_t(1) << 24;
constexpr uint64_t kFlagPointer = 1 << 1;
constexpr uint64_t kArrayMask = 7 << 4;
constexpr uint64_t kArrayFixed = 1 << 4;
constexpr int kMaxDepth = 8;
// JSON text of one event: beyond it fields are null (a schema nesting itself many times).
constexpr size_t kMaxJsonBytes = 256 * 1024;
constexpr uint64_t kMaxArrayElements = 4096;
constexpr uint64_t kSchemaTypeStatic = 1, kSchemaTypeDynamic = 2;

inline uint64_t Pad8(uint64_t n) { return (n + 7) & ~uint64_t(7); }

enum Kind { kSigned, kUnsigned, kFloat, kChar, kOther };

Kind KindOf(uint64_t t) {
  switch (t) {
    case 3:
    case 5:
    case 7:
    case 9:
    case 11:
    case 13:
    case 15:
    case 17:
      return kSigned;
    case 2:
    case 4:
    case 6:
    case 8:
    case 10:
    case 12:
    case 14:
    case 16:
    case 18:
    case 22:
    case 23:
    case 24:
    case 26:
    case 27:
    case 32:
    case 67:
    case 68:
    case 69:
    case 70:
    case 71:
    case 72:
    case 73:
    case 74:
    case 80:
      return kUnsigned;
    case 19:
    case 20:
    case 43:
    case 44:
      return kFloat;
    case 1:
    case 25:
      return kChar;
    default:
      return kOther;
  }
}

uint64_t LoadUnsigned(const uint8_t* p, uint64_t size) {
  uint64_t v = 0;
  memcpy(&v, p, size);  // little-endian
  return v;
}
int64_t LoadSigned(const uint8_t* p, uint64_t size) {
  uint64_t v = LoadUnsigned(p, size);
  if (size < 8 && (v >> (size * 8 - 1)) & 1) v |= ~uint64_t(0) << (size * 8);
  return static_cast<int64_t>(v);
}

void AppendBase64(std::string* out, const uint8_t* p, uint64_t n) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out->push_back('"');
  for (uint64_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t(p[i]) << 16;
    if (i + 1 < n) v |= uint32_t(p[i + 1]) << 8;
    if (i + 2 < n) v |= p[i + 2];
    out->push_back(kAlphabet[(v >> 18) & 63]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=');
    out->push_back(i + 2 < n ? kAlphabet[v & 63] : '=');
  }
  out->push_back('"');
}

// Length of the valid UTF-8 sequence at p (0 when invalid).
size_t Utf8Len(const uint8_t* p, size_t n) {
  uint8_t c = p[0];
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
  }
  return len;
}

// A JSON string: valid UTF-8 kept, other bytes as \u00XX (Latin-1), escapes per RFC 8259.
void AppendString(std::string* out, const uint8_t* p, size_t n) {
  out->push_back('"');
  char buf[8];
  for (size_t i = 0; i < n;) {
    uint8_t c = p[i];
    size_t len = Utf8Len(p + i, n - i);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(char(c));
      i += 1;
    } else if (c < 0x20 || len == 0) {
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
      i += 1;
    } else {
      out->append(reinterpret_cast<const char*>(p + i), len);
      i += len;
    }
  }
  out->push_back('"');
}

void AppendDouble(std::string* out, double v, bool single) {
  if (!isfinite(v)) {
    out->append(isnan(v) ? "\"NaN\"" : v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    return;
  }
  char buf[40];
  snprintf(buf, sizeof(buf), single ? "%.9g" : "%.17g", v);
  out->append(buf);
}

}  // namespace

struct PayloadSchemas::Strings {
  struct Copy {
    uint32_t index;
    uint64_t offset;
    const uint8_t* p;
    uint32_t n;
    bool null;
  };
  std::vector<Copy> copies;
  const Copy* Find(uint32_t index, uint64_t offset) const {
    for (const Copy& c : copies) {
      if (c.index == index && c.offset == offset) return &c;
    }
    return nullptr;
  }
};

void PayloadSchemas::Define(int proc, uint32_t domain, std::string_view body) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(body.data());
  const uint64_t n = body.size();
  if (n < sizeof(PayloadSchemaDef)) return;
  PayloadSchemaDef def;
  memcpy(&def, p, sizeof(def));
  Schema s;
  s.id = def.schema_id;
  s.type = def.schema_type;
  s.flags = def.flags;
  s.static_size = def.static_size;
  uint64_t pos = sizeof(def);
  if (def.name_len > n - pos || Pad8(def.name_len) > n - pos) return;
  s.name.assign(reinterpret_cast<const char*>(p + pos), def.name_len);
  pos += Pad8(def.name_len);
  for (uint32_t i = 0; i < def.num_entries; ++i) {
    if (n - pos < sizeof(PayloadSchemaEntryDef)) return;
    PayloadSchemaEntryDef d;
    memcpy(&d, p + pos, sizeof(d));
    pos += sizeof(d);
    if (d.name_len > n - pos || Pad8(d.name_len) > n - pos) return;
    Entry e;
    e.flags = d.flags;
    e.type = d.type;
    e.detail = d.detail;
    e.offset = d.offset;
    e.size = d.size;
    e.name.assign(reinterpret_cast<const char*>(p + pos), d.name_len);
    pos += Pad8(d.name_len);
    s.entries.push_back(std::move(e));
  }
  schemas_[std::make_tuple(proc, domain, s.id)] = std::move(s);
}

const PayloadSchemas::Schema* PayloadSchemas::Find(int proc, uint32_t domain, uint64_t id) const {
  auto it = schemas_.find(std::make_tuple(proc, domain, id));
  return it == schemas_.end() ? nullptr : &it->second;
}

void PayloadSchemas::Value(int proc, uint32_t domain, const Entry& e, const uint8_t* data, uint64_t len, uint64_t base,
                           uint32_t index, const Strings& strings, int depth, std::string* out, bool* lossy) const {
  if (out->size() > kMaxJsonBytes) {
    out->append("null");
    *lossy = true;
    return;
  }
  const uint64_t off = e.offset == kUnknown ? kUnknown : base + e.offset;
  const bool known = off != kUnknown && e.size != 0 && off <= len && e.size <= len - off;
  const uint8_t* p = known ? data + off : nullptr;
  const uint64_t array = e.flags & kArrayMask;
  const Kind kind = KindOf(e.type);
  // Strings: inline fixed-length, or a pointer whose target the recorder copied.
  if (e.type >= 75 && e.type <= 76 && !(e.flags & kFlagPointer)) {
    if (e.detail > 0 && (array == 0 || array == kArrayFixed)) {
      if (!p) {
        out->append("null");
        *lossy = true;
        return;
      }
      AppendString(out, p, strnlen(reinterpret_cast<const char*>(p), e.size));
      return;
    }
    if (e.detail == 0 && array == 0 && off != kUnknown) {
      const Strings::Copy* c = strings.Find(index, off);
      if (!c || c->null) {
        out->append("null");
      } else {
        AppendString(out, c->p, c->n);
      }
      return;
    }
  }
  if (!p) {
    out->append("null");
    *lossy = true;
    return;
  }
  if (e.flags & kFlagPointer) {
    out->append(std::to_string(LoadUnsigned(p, 8)));
    return;
  }
  const Schema* nested = e.type >= kStaticIdStart ? Find(proc, domain, e.type) : nullptr;
  uint64_t count = 1;
  if (array == kArrayFixed) {
    count = e.detail;
  } else if (array != 0) {
    count = 0;  // variable-length arrays: raw below
  }
  if (kind == kChar && array == kArrayFixed) {
    AppendString(out, p, strnlen(reinterpret_cast<const char*>(p), e.size));
    return;
  }
  const bool scalar = kind == kSigned || kind == kUnsigned || kind == kFloat || kind == kChar;
  const bool decodable =
      (scalar || nested) && count > 0 && count <= kMaxArrayElements && e.size % count == 0 && depth < kMaxDepth;
  const uint64_t elem = decodable ? e.size / count : 0;
  if (!decodable || (scalar && elem != 1 && elem != 2 && elem != 4 && elem != 8) ||
      (kind == kFloat && elem != 4 && elem != 8) ||
      (nested && nested->type != kPayloadDefEnum && nested->type != kSchemaTypeStatic)) {
    out->append("{\"raw\":");
    AppendBase64(out, p, e.size);
    out->push_back('}');
    return;
  }
  if (array) out->push_back('[');
  for (uint64_t i = 0; i < count; ++i) {
    if (i) out->push_back(',');
    const uint8_t* q = p + i * elem;
    if (nested && nested->type == kPayloadDefEnum) {
      uint64_t v = LoadUnsigned(q, elem);
      const Entry* hit = nullptr;
      for (const Entry& value : nested->entries) {
        if (value.detail == v) hit = &value;
      }
      if (hit) {
        AppendString(out, reinterpret_cast<const uint8_t*>(hit->name.data()), hit->name.size());
      } else {
        out->append(std::to_string(v));
      }
    } else if (nested) {
      Object(proc, domain, *nested, data, len, off + i * elem, index, strings, depth + 1, out, lossy);
    } else if (kind == kFloat) {
      if (elem == 4) {
        float f;
        memcpy(&f, q, 4);
        AppendDouble(out, f, true);
      } else {
        double d;
        memcpy(&d, q, 8);
        AppendDouble(out, d, false);
      }
    } else if (kind == kSigned || (kind == kChar && elem == 1)) {
      out->append(std::to_string(LoadSigned(q, elem)));
    } else {
      out->append(std::to_string(LoadUnsigned(q, elem)));
    }
  }
  if (array) out->push_back(']');
}

void PayloadSchemas::Object(int proc, uint32_t domain, const Schema& s, const uint8_t* data, uint64_t len,
                            uint64_t base, uint32_t index, const Strings& strings, int depth, std::string* out,
                            bool* lossy) const {
  out->push_back('{');
  bool first = true;
  for (const Entry& e : s.entries) {
    if (out->size() > kMaxJsonBytes) {
      *lossy = true;
      break;
    }
    if (!first) out->push_back(',');
    first = false;
    AppendString(out, reinterpret_cast<const uint8_t*>(e.name.data()), e.name.size());
    out->push_back(':');
    Value(proc, domain, e, data, len, base, index, strings, depth, out, lossy);
  }
  out->push_back('}');
}

std::string PayloadSchemas::ToJson(int proc, uint32_t domain, const uint8_t* block, uint64_t len) const {
  struct Data {
    PayloadEntryHeader h;
    const uint8_t* p;
  };
  std::vector<Data> data;
  Strings strings;
  uint64_t pos = 0;
  while (len - pos >= sizeof(PayloadEntryHeader)) {
    PayloadEntryHeader h;
    memcpy(&h, block + pos, sizeof(h));
    pos += sizeof(h);
    if (h.stored > len - pos) break;  // damaged block: what came before is kept
    const uint8_t* p = block + pos;
    pos += Pad8(h.stored);
    if (pos > len) pos = len;
    if (h.kind == kPayloadEntryData) {
      data.push_back({h, p});
    } else if (h.kind == kPayloadEntryString) {
      strings.copies.push_back({h.index, h.key, p, h.stored, h.size == ~uint64_t(0) - 1});
    }
  }
  std::string out;
  if (data.size() != 1) out.push_back('[');
  for (size_t i = 0; i < data.size(); ++i) {
    const Data& d = data[i];
    if (i) out.push_back(',');
    const Schema* s = Find(proc, domain, d.h.key);
    const bool truncated = d.h.stored < d.h.size;
    if (!s || s->type != kSchemaTypeStatic) {
      out.append("{\"schemaId\":");
      out.append(std::to_string(d.h.key));
      if (s && !s->name.empty()) {
        out.append(",\"schema\":");
        AppendString(&out, reinterpret_cast<const uint8_t*>(s->name.data()), s->name.size());
      }
      out.append(",\"size\":");
      out.append(std::to_string(d.h.size));
      if (truncated) out.append(",\"truncated\":true");
      out.append(",\"raw\":");
      AppendBase64(&out, d.p, d.h.stored);
      out.push_back('}');
      continue;
    }
    std::string obj;
    bool lossy = false;
    Object(proc, domain, *s, d.p, d.h.stored, 0, d.h.index, strings, 0, &obj, &lossy);
    if (truncated || lossy) {  // {"f": ..., "_truncated": true, "_size": N, "_raw": "..."}
      obj.pop_back();
      if (obj.size() > 1) obj.push_back(',');
      if (truncated) obj.append("\"_truncated\":true,\"_size\":" + std::to_string(d.h.size) + ",");
      obj.append("\"_raw\":");
      AppendBase64(&obj, d.p, d.h.stored);
      obj.push_back('}');
    }
    out += obj;
  }
  if (data.size() != 1) out.push_back(']');
  (void)kSchemaTypeDynamic;
  return out;
}

}  // namespace nvtx_reader
