// Strings: UTF-8 helpers, kStringDef records and the per-thread interning cache.
//
// Event messages are interned per thread: a direct-mapped cache (kStringCacheSize
// slots keyed by hash + length + content) maps a text to the string id this thread
// already defined in the current segment. On a miss a new id is taken from the global
// counter and a kStringDef is written into the thread's stream before the event that
// uses it. The cache is cleared when the thread switches segment.
#ifndef NVTX_PLUGINS_TF_RECORDER_STRING_TABLE_H_
#define NVTX_PLUGINS_TF_RECORDER_STRING_TABLE_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <wchar.h>

#include <string>

#include "recorder/segment_writer.h"

namespace nvtx_recorder {

// Length of the longest prefix of s[0, len) no longer than max that does not split a
// UTF-8 sequence.
size_t Utf8TruncateLen(const char* s, size_t len, size_t max);

// Converts a NUL-terminated UTF-32 wchar_t string to UTF-8 (invalid code points become
// U+FFFD). Stops after max_out bytes (on a character boundary). Returns the length;
// *out points to ts's scratch buffer (or to a static empty string on failure).
size_t Utf32ToUtf8(ThreadState* ts, const wchar_t* w, size_t max_out, const char** out);

// Same conversion into a std::string (rare calls that may have no thread state).
std::string Utf32ToUtf8String(const wchar_t* w, size_t max_out);

// Writes kStringDef(id, domain, text) into ts's stream (text truncated to fit a chunk).
bool WriteStringDef(ThreadState* ts, uint32_t id, uint16_t domain, const char* s, size_t len);

inline uint64_t HashBytes(const char* s, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    s += 8;
    n -= 8;
  }
  if (n) {
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i) w |= uint64_t(uint8_t(s[i])) << (8 * i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
  }
  h ^= h >> 29;
  return h;
}

uint32_t InternSlow(ThreadState* ts, const char* s, size_t len, uint64_t hash);

// Id of `s` in ts's current segment (defining it first if needed); 0 if it could not be
// defined (the event is then recorded without a message).
inline uint32_t Intern(ThreadState* ts, const char* s, size_t len) {
  uint64_t hash = HashBytes(s, len);
  const StringCacheEntry& e = ts->cache[hash & (kStringCacheSize - 1)];
  if (NVTXREC_LIKELY(e.id != 0 && e.hash == hash && e.len == len && memcmp(e.text, s, len) == 0)) {
    return e.id;
  }
  return InternSlow(ts, s, len, hash);
}

// Intern() for a NUL-terminated message, first probing the pointer-keyed cache (one
// strcmp against the interned copy instead of strlen + hash + memcmp).
inline uint32_t InternCString(ThreadState* ts, const char* s) {
  PointerCacheEntry& p = ts->ptr_cache[(reinterpret_cast<uintptr_t>(s) >> 3) & (kPointerCacheSize - 1)];
  if (NVTXREC_LIKELY(p.ptr == s)) {
    const StringCacheEntry& e = ts->cache[p.slot];
    if (NVTXREC_LIKELY(e.id == p.id && strcmp(e.text, s) == 0)) return e.id;
  }
  size_t len = strlen(s);
  uint64_t hash = HashBytes(s, len);
  uint32_t slot = uint32_t(hash & (kStringCacheSize - 1));
  const StringCacheEntry& e = ts->cache[slot];
  uint32_t id;
  if (e.id != 0 && e.hash == hash && e.len == len && memcmp(e.text, s, len) == 0) {
    id = e.id;
  } else {
    id = InternSlow(ts, s, len, hash);
  }
  if (e.id == id && id != 0) p = PointerCacheEntry{s, slot, id};
  return id;
}

// Forgets every cached id (segment switch, or a full arena) and their copies.
void ClearStringCache(ThreadState* ts);
// Unmaps the thread's string arena and scratch buffer (thread exit).
void ReleaseStringMemory(ThreadState* ts);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_STRING_TABLE_H_
