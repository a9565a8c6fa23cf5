#include "recorder/string_table.h"

#include <stdlib.h>

#include "recorder/os_util.h"
#include "recorder/string_ids.h"

namespace nvtx_recorder {

using namespace nvtx_record;

size_t Utf8TruncateLen(const char* s, size_t len, size_t max) {
  if (len <= max) return len;
  size_t k = max;
  // s[k] is the first byte left out; back off while it continues a sequence.
  while (k > 0 && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
  return k;
}

// The scratch buffer grows in whole pages by mremap (no malloc on an event's path).
static bool GrowScratch(ThreadState* ts, size_t need) {
  if (ts->scratch_cap >= need) return true;
  size_t cap = ts->scratch_cap ? ts->scratch_cap : 4096;
  while (cap < need) cap *= 2;
  char* p = static_cast<char*>(RemapMemory(ts->scratch, ts->scratch_cap, cap));
  if (!p) return false;
  ts->scratch = p;
  ts->scratch_cap = cap;
  return true;
}

namespace {

// Encodes one code point (invalid ones as U+FFFD); returns its byte count.
size_t EncodeUtf8(uint32_t c, char* buf) {
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
  if (c < 0x80) {
    buf[0] = char(c);
    return 1;
  }
  if (c < 0x800) {
    buf[0] = char(0xC0 | (c >> 6));
    buf[1] = char(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    buf[0] = char(0xE0 | (c >> 12));
    buf[1] = char(0x80 | ((c >> 6) & 0x3F));
    buf[2] = char(0x80 | (c & 0x3F));
    return 3;
  }
  buf[0] = char(0xF0 | (c >> 18));
  buf[1] = char(0x80 | ((c >> 12) & 0x3F));
  buf[2] = char(0x80 | ((c >> 6) & 0x3F));
  buf[3] = char(0x80 | (c & 0x3F));
  return 4;
}

}  // namespace

size_t Utf32ToUtf8(ThreadState* ts, const wchar_t* w, size_t max_out, const char** out) {
  static const char kEmpty[1] = {0};
  *out = kEmpty;
  if (!w) return 0;
  size_t len = 0;
  for (size_t i = 0; w[i] != 0; ++i) {
    char buf[4];
    size_t k = EncodeUtf8(static_cast<uint32_t>(w[i]), buf);
    if (len + k > max_out) break;
    if (!GrowScratch(ts, len + k + 1)) break;
    memcpy(ts->scratch + len, buf, k);
    len += k;
  }
  if (!ts->scratch) return 0;
  ts->scratch[len] = 0;
  *out = ts->scratch;
  return len;
}

std::string Utf32ToUtf8String(const wchar_t* w, size_t max_out) {
  std::string out;
  if (!w) return out;
  for (size_t i = 0; w[i] != 0; ++i) {
    char buf[4];
    size_t k = EncodeUtf8(static_cast<uint32_t>(w[i]), buf);
    if (out.size() + k > max_out) break;
    out.append(buf, k);
  }
  return out;
}

// Writes kStringDef(id, domain, s[0, len)) at p, reserved for its 16 + len rounded up
// to 8 bytes (len already cut by StringDefLen).
static void WriteStringDefAt(ThreadState* ts, uint8_t* p, uint32_t id, uint16_t domain, const char* s, size_t len) {
  const uint32_t padded = uint32_t((len + 7) & ~size_t(7));
  uint32_t hdr[2] = {uint32_t(len), 0};
  memcpy(p + 8, hdr, 8);
  if (len) memcpy(p + 16, s, len);
  if (padded != len) memset(p + 16 + len, 0, padded - len);
  Commit(ts, p, MakeWord0(kStringDef, 0, domain, id), 16 + padded);
}

// The text length a kStringDef keeps (cut to fit a chunk).
static size_t StringDefLen(const char* s, size_t len) { return s ? Utf8TruncateLen(s, len, MaxStringBytes()) : 0; }

bool WriteStringDef(ThreadState* ts, uint32_t id, uint16_t domain, const char* s, size_t len) {
  len = StringDefLen(s, len);
  uint8_t* p = Reserve(ts, uint32_t(16 + ((len + 7) & ~size_t(7))));
  if (!p) return false;
  WriteStringDefAt(ts, p, id, domain, s, len);
  return true;
}

namespace {

// A copy of s[0, len) NUL-terminated in the thread's string arena (mapped on first use);
// when the arena is full, the whole cache is forgotten and the arena starts over (the
// texts are defined again at their next use). Null when no memory could be mapped.
char* ArenaCopy(ThreadState* ts, const char* s, size_t len) {
  if (!ts->arena) {
    ts->arena = static_cast<char*>(MapZeroed(kStringArenaBytes));
    if (!ts->arena) return nullptr;
    ts->arena_used = 0;
  }
  const uint32_t need = uint32_t((len + 1 + 7) & ~size_t(7));
  if (ts->arena_used + need > kStringArenaBytes) ClearStringCache(ts);
  char* copy = ts->arena + ts->arena_used;
  ts->arena_used += need;
  memcpy(copy, s, len);
  copy[len] = 0;
  return copy;
}

}  // namespace

uint32_t InternSlow(ThreadState* ts, const char* s, size_t len, uint64_t hash) {
  ErrnoGuard keep_errno;
  // The id is taken after the space is reserved, and written there: it must belong to
  // the segment it goes into (string_ids.h).
  const size_t def_len = StringDefLen(s, len);
  const uint32_t n = uint32_t(16 + ((def_len + 7) & ~size_t(7)));
  uint32_t id = 0;
  for (int attempt = 0; id == 0; ++attempt) {
    if (attempt == 4) return 0;
    uint8_t* p = Reserve(ts, n);
    if (!p) return 0;
    id = AllocSegmentStringId(ts);
    if (id) {
      WriteStringDefAt(ts, p, id, 0, s, def_len);
    } else {
      RestartSegmentStringIds();  // then the next Reserve moves ts to the new segment
    }
  }
  if (len > kMaxCachedStringBytes) return id;  // long texts: defined at every use
  char* copy = ArenaCopy(ts, s, len);
  if (!copy) return id;
  StringCacheEntry& e = ts->cache[hash & (kStringCacheSize - 1)];
  e.text = copy;
  e.hash = hash;
  e.len = uint32_t(len);
  e.id = id;
  return id;
}

void ClearStringCache(ThreadState* ts) {
  for (int i = 0; i < kPointerCacheSize; ++i) ts->ptr_cache[i] = PointerCacheEntry{nullptr, 0, 0};
  for (int i = 0; i < kStringCacheSize; ++i) ts->cache[i] = StringCacheEntry{0, 0, 0, nullptr};
  ts->arena_used = 0;
}

void ReleaseStringMemory(ThreadState* ts) {
  ClearStringCache(ts);
  UnmapMemory(ts->arena, kStringArenaBytes);
  ts->arena = nullptr;
  UnmapMemory(ts->scratch, ts->scratch_cap);
  ts->scratch = nullptr;
  ts->scratch_cap = 0;
}

}  // namespace nvtx_recorder
