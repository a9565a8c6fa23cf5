// See json_lines.h. The layout of each line mirrors trace_json.py's _python_lines.
#include "reader/json_lines.h"

#include <string.h>

#include <charconv>
#include <string_view>

#include "format/record_format.h"

namespace {

// Room for everything of a row but its texts: two lines of fixed keys and at most a
// dozen numbers of 20 digits each.
constexpr uint64_t kRowFixedBytes = 640;

class Out {
 public:
  explicit Out(char* p) : p_(p) {}
  char* pos() const { return p_; }
  void Text(std::string_view s) {
    memcpy(p_, s.data(), s.size());
    p_ += s.size();
  }
  template <size_t n>
  void Lit(const char (&s)[n]) {
    memcpy(p_, s, n - 1);
    p_ += n - 1;
  }
  template <class T>
  void Int(T v) {
    p_ = std::to_chars(p_, p_ + 24, v).ptr;
  }
  // Python's f"{v:#x}".
  void Hex(uint64_t v) {
    Lit("0x");
    p_ = std::to_chars(p_, p_ + 16, v, 16).ptr;
  }
  // f"{v & 0xFFFFFF:06x}"
  void Color(uint32_t v) {
    static const char kDigits[] = "0123456789abcdef";
    for (int shift = 20; shift >= 0; shift -= 4) *p_++ = kDigits[(v >> shift) & 0xF];
  }
  // trace_json._fmt_us: microseconds of |magnitude| ns (negative: a leading '-'), the
  // fraction as three digits, left out when zero.
  void Micros(bool negative, uint64_t magnitude) {
    if (negative) *p_++ = '-';
    Int(magnitude / 1000);
    uint64_t r = magnitude % 1000;
    if (r) {
      *p_++ = '.';
      *p_++ = static_cast<char>('0' + r / 100);
      *p_++ = static_cast<char>('0' + r / 10 % 10);
      *p_++ = static_cast<char>('0' + r % 10);
    }
  }
  void Micros(int64_t ns) {
    bool negative = ns < 0;
    Micros(negative, negative ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns));
  }

 private:
  char* p_;
};

bool Entry(const NvtxrTextTable* table, uint64_t index, std::string_view* out) {
  if (!table || index >= table->count) return false;
  uint64_t lo = table->offsets[index], hi = table->offsets[index + 1];
  *out = std::string_view(table->text + lo, hi - lo);
  return true;
}

// '{"name":N,"cat":C,"ph":"' -- every line starts so.
void Head(Out& o, std::string_view name, std::string_view cat) {
  o.Lit("{\"name\":");
  o.Text(name);
  o.Lit(",\"cat\":");
  o.Text(cat);
  o.Lit(",\"ph\":\"");
}

void PidTid(Out& o, int64_t pid, int64_t tid) {
  o.Lit(",\"pid\":");
  o.Int(pid);
  o.Lit(",\"tid\":");
  o.Int(tid);
}

// The args after "domain":...: category, color, payload (when formatted here).
void ArgsMiddle(Out& o, const NvtxrRow& r) {
  if (r.flags & kNvtxrHasColor) {
    o.Lit(",\"color\":\"#");
    o.Color(r.color);
    o.Lit("\"");
  }
  uint32_t low = static_cast<uint32_t>(r.payload);
  switch (r.payload_type) {
    case nvtx_record::kPayloadU64:
      o.Lit(",\"payload\":");
      o.Int(r.payload);
      break;
    case nvtx_record::kPayloadI64:
      o.Lit(",\"payload\":");
      o.Int(static_cast<int64_t>(r.payload));
      break;
    case nvtx_record::kPayloadU32:
      o.Lit(",\"payload\":");
      o.Int(low);
      break;
    case nvtx_record::kPayloadI32:
      o.Lit(",\"payload\":");
      o.Int(static_cast<int32_t>(low));
      break;
    default:  // none (the others come as extras)
      break;
  }
}

}  // namespace

NVTXR_API int64_t nvtxr_json_lines(const NvtxrRow* rows, int64_t count, int64_t origin_ns, const NvtxrTextTable* names,
                                   const NvtxrTextTable* domains, const NvtxrTextTable* extras,
                                   const int64_t* extra_index, uint64_t* async_id, char* out, uint64_t capacity,
                                   uint64_t* written) {
  if (!rows || !async_id || !out || !written || count < 0) return -1;
  const uint64_t origin = static_cast<uint64_t>(origin_ns);
  uint64_t id = *async_id;
  Out o(out);
  int64_t i = 0;
  for (; i < count; ++i) {
    const NvtxrRow& r = rows[i];
    std::string_view name, cat, extra;
    if (!Entry(names, r.message, &name) || !Entry(domains, r.domain, &cat)) return -1;
    int64_t extra_at = extra_index ? extra_index[i] : -1;
    if (extra_at >= 0 && !Entry(extras, static_cast<uint64_t>(extra_at), &extra)) return -1;
    uint64_t need = 2 * (name.size() + cat.size()) + extra.size() + kRowFixedBytes;
    uint64_t used = static_cast<uint64_t>(o.pos() - out);
    if (capacity - used < need) {
      if (i == 0) *written = need;
      break;
    }
    if (i) o.Lit(",\n");
    // As numpy's (rows["start_ns"] - origin): int64, wrapping.
    const int64_t s = static_cast<int64_t>(static_cast<uint64_t>(r.start_ns) - origin);
    const int64_t e = static_cast<int64_t>(static_cast<uint64_t>(r.end_ns) - origin);
    // {"domain":...} args up to what follows the payload (no closing brace).
    auto args = [&](Out& w) {
      w.Lit(",\"args\":{\"domain\":");
      if (r.domain) {
        w.Text(cat);
      } else {
        w.Lit("\"\"");
      }
      if (extra_at >= 0) {
        w.Text(extra);
      } else {
        ArgsMiddle(w, r);
      }
    };
    const bool unclosed = r.flags & kNvtxrUnclosed;
    if (r.kind == kNvtxrPushPop) {
      Head(o, name, cat);
      if (unclosed) {
        o.Lit("B\",\"ts\":");
        o.Micros(s);
      } else {
        o.Lit("X\",\"ts\":");
        o.Micros(s);
        o.Lit(",\"dur\":");
        const __int128 dur = static_cast<__int128>(e) - s;  // Python's ints do not wrap
        o.Micros(dur < 0, static_cast<uint64_t>(dur < 0 ? -dur : dur));
      }
      PidTid(o, r.pid, r.tid);
      args(o);
      o.Lit(",\"depth\":");
      o.Int(r.depth);
      if (unclosed) o.Lit(",\"unclosed\":true");
      o.Lit("}}");
    } else if (r.kind == kNvtxrMark) {
      Head(o, name, cat);
      o.Lit("i\",\"s\":\"t\",\"ts\":");
      o.Micros(s);
      PidTid(o, r.pid, r.tid);
      args(o);
      o.Lit("}}");
    } else {
      ++id;
      Head(o, name, cat);
      o.Lit("b\",\"id2\":{\"local\":\"");
      o.Hex(id);
      o.Lit("\"},\"ts\":");
      o.Micros(s);
      PidTid(o, r.pid, r.tid);
      args(o);
      o.Lit(",\"range_id\":");
      o.Int(r.range_id);
      if (unclosed) {
        o.Lit(",\"unclosed\":true}}");
      } else {
        o.Lit(",\"end_tid\":");
        o.Int(r.end_tid);
        o.Lit("}},\n");
        Head(o, name, cat);
        o.Lit("e\",\"id2\":{\"local\":\"");
        o.Hex(id);
        o.Lit("\"},\"ts\":");
        o.Micros(e);
        PidTid(o, r.pid, r.end_tid);
        o.Lit("}");
      }
    }
  }
  *async_id = id;
  if (i) *written = static_cast<uint64_t>(o.pos() - out);
  return i;
}
