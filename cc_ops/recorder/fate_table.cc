// The thread's FateTable (segment_writer.h): which of its open push/pop ranges were not
// written, at any depth and in any domain, so that every pop follows its push (gate.h).
// Open addressing with linear probing over 64-bit words of bits, one word per (domain,
// depth / 64); words are never removed (a cleared word stays as a key with no bits), so
// the table grows only with the distinct (domain, depth / 64) a thread reaches while a
// capture range is set. Its memory comes from MapZeroed (no malloc on an event's path).
#include "recorder/gate.h"
#include "recorder/os_util.h"

namespace nvtx_recorder {

namespace {

constexpr uint32_t kInitialWords = 256;  // 4 KiB

inline uint64_t FateKey(Unwritten reason, uint16_t domain, int32_t depth) {
  return ((uint64_t(reason) << 48) | (uint64_t(domain) << 32) | (uint32_t(depth) >> 6)) + 1;
}

inline uint32_t Slot(uint64_t key, uint32_t capacity) {
  return uint32_t((key * 0x9E3779B97F4A7C15ull) >> 32) & (capacity - 1);
}

// The word of `key`, inserted when `insert`; null when absent (and not inserted) or when
// the table cannot grow.
FateWord* FindWord(FateTable* t, uint64_t key, bool insert) {
  if (!t->words) {
    if (!insert) return nullptr;
    t->words = static_cast<FateWord*>(MapZeroed(kInitialWords * sizeof(FateWord)));
    if (!t->words) return nullptr;
    t->capacity = kInitialWords;
    t->used = 0;
  }
  for (uint32_t i = Slot(key, t->capacity);; i = (i + 1) & (t->capacity - 1)) {
    FateWord& w = t->words[i];
    if (w.key == key) return &w;
    if (w.key != 0) continue;
    if (!insert) return nullptr;
    if (2 * (t->used + 1) > t->capacity) break;  // grow first
    w.key = key;
    t->used++;
    return &w;
  }
  // Twice the size, every word moved over.
  const uint32_t capacity = t->capacity * 2;
  auto* words = static_cast<FateWord*>(MapZeroed(size_t(capacity) * sizeof(FateWord)));
  if (!words) return nullptr;
  for (uint32_t j = 0; j < t->capacity; ++j) {
    const FateWord& w = t->words[j];
    if (w.key == 0) continue;
    uint32_t i = Slot(w.key, capacity);
    while (words[i].key != 0) i = (i + 1) & (capacity - 1);
    words[i] = w;
  }
  UnmapMemory(t->words, size_t(t->capacity) * sizeof(FateWord));
  t->words = words;
  t->capacity = capacity;
  return FindWord(t, key, true);
}

}  // namespace

bool MarkUnwritten(ThreadState* ts, uint16_t domain, int32_t depth, Unwritten reason) {
  if (depth < 0) return false;
  FateWord* w = FindWord(&ts->fates, FateKey(reason, domain, depth), true);
  if (!w) return false;
  w->bits |= uint64_t(1) << (depth & 63);
  ts->skipped_open++;
  return true;
}

Unwritten TakeUnwritten(ThreadState* ts, uint16_t domain, int32_t depth) {
  if (depth < 0 || ts->skipped_open == 0) return kWritten;
  const uint64_t bit = uint64_t(1) << (depth & 63);
  for (Unwritten reason : {kSkipped, kDropped}) {
    FateWord* w = FindWord(&ts->fates, FateKey(reason, domain, depth), false);
    if (w && (w->bits & bit)) {
      w->bits &= ~bit;
      ts->skipped_open--;
      return reason;
    }
  }
  return kWritten;
}

void ReleaseFates(ThreadState* ts) {
  UnmapMemory(ts->fates.words, size_t(ts->fates.capacity) * sizeof(FateWord));
  ts->fates = FateTable{nullptr, 0, 0};
}

}  // namespace nvtx_recorder
