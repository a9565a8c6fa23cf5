// The push/pop and start/end ranges of one recording as compact columns, in the order the
// decoder hands them out (what `nvtx-tf analyze` needs of a range: 33 bytes, not a row's
// 80), filled straight from the decoder without passing through Python. Then each range's
// name: (domain, message) made one index, as nvtx_plugins_tf/recorder/reports/ranges.py
// numbers them (domains of equal name merged). Or the rows of an nsys export's NVTX_EVENTS
// (AddExportRows), their domains then (domainId, pid) pairs.
#ifndef NVTX_PLUGINS_TF_READER_RANGE_COLUMNS_H_
#define NVTX_PLUGINS_TF_READER_RANGE_COLUMNS_H_

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reader/decode.h"

namespace nvtx_reader {

class Decoder;

struct RangeColumns {
  enum : uint8_t { kOpen = 1, kPushPop = 2 };

  std::vector<int64_t> start, end;  // the recording's clock (end: -1 when open)
  std::vector<uint32_t> thread;     // the range's (pid, tid): its index in `threads`
  // the decoder's global indexes (until Name); after Name, message holds each range's name
  // (name()), domain nothing needed
  std::vector<uint32_t> message, domain;
  std::vector<uint8_t> flags;  // kOpen, kPushPop
  // Over every row decoded (marks too, as the SQLite export's rows): the first start and
  // the last time (start, or end of a closed range); rows: how many.
  int64_t lowest = std::numeric_limits<int64_t>::max();
  int64_t highest = std::numeric_limits<int64_t>::min();
  int64_t rows = 0;

  // The (pid, tid) pairs of the ranges, in the order they first came (4 bytes a range, not
  // 16: few threads); each has a range at least (Rollback drops those of no range).
  struct Thread {
    int64_t pid, tid;
  };
  std::vector<Thread> threads;

 private:
  struct ThreadHash {
    size_t operator()(const std::pair<int64_t, int64_t>& t) const {
      return static_cast<size_t>(static_cast<uint64_t>(t.first) * 0x9E3779B97F4A7C15ull ^
                                 static_cast<uint64_t>(t.second));
    }
  };
  std::unordered_map<std::pair<int64_t, int64_t>, uint32_t, ThreadHash> thread_index_;
  // (AddExportRows) a (domainId, pid) pair -> its index: keyed by the pair itself, so pairs whose
  // hashes collide (a crafted domainId) are two entries, not one pair appended again at every turn
  std::unordered_map<std::pair<int64_t, int64_t>, uint32_t, ThreadHash> pair_index_;
  int64_t last_pair_ = -1;
  uint32_t last_thread_ = 0;                          // (valid while threads is not empty)
  uint32_t FindThread(int64_t p, int64_t t);          // (ThreadOf, not the last one)
  uint32_t FindPair(int64_t domain_id, int64_t pid);  // (Pair, not the last one)

 public:
  size_t size() const { return start.size(); }
  // After Name: each range's name, the index of its key (in the message column's room: the
  // message is not needed then, and the pages are those already touched)
  const std::vector<uint32_t>& name() const { return message; }
  int64_t pid(size_t i) const { return threads[thread[i]].pid; }
  // The index in `threads` of (p, t), added when new.
  uint32_t ThreadOf(int64_t p, int64_t t) {
    if (!threads.empty() && threads[last_thread_].pid == p && threads[last_thread_].tid == t) return last_thread_;
    return FindThread(p, t);
  }
  void Reserve(size_t n);
  // Empty again, the room kept (the next input's columns reuse the pages already touched).
  void Clear();
  // Appends the ranges of n decoder rows (marks are only counted in lowest/highest).
  void AddRows(const NvtxrRow* r, int64_t n);
  // Appends a closed push/pop range (Decoder::NextRanges).
  void AddPushPop(int64_t s, int64_t e, int64_t p, int64_t t, uint32_t msg, uint32_t dom) {
    rows++;
    lowest = std::min(lowest, s);
    highest = std::max(highest, std::max(s, e));
    Append(s, e, p, t, msg, dom, kPushPop);
  }
  // One range's columns (AddRows, AddPushPop).
  void Append(int64_t s, int64_t e, int64_t p, int64_t t, uint32_t msg, uint32_t dom, uint8_t f) {
    start.push_back(s);
    end.push_back(e);
    thread.push_back(ThreadOf(p, t));
    message.push_back(msg);
    domain.push_back(dom);
    flags.push_back(f);
  }
  // Appends the ranges of n rows of an nsys export (decode.h, nvtxr_ranges_add_export):
  // message[i] becomes the range's message, the index of its (domainId, pid) pair (`pairs`,
  // in the order they first come) its domain. Returns the ranges added.
  int64_t AddExportRows(int64_t n, const int64_t* s, const int64_t* e, const uint8_t* e_valid, int64_t e_offset,
                        const int64_t* event_type, const int64_t* global_tid, const int64_t* domain_id,
                        const int32_t* msg);
  // One row of an export (AddExportRows' rule); whether it is a range (then appended).
  bool AddExportRow(int64_t s, int64_t e, bool open, int64_t type, int64_t global_tid, int64_t domain_id, uint32_t msg);
  // Whether a row of eventType `type` is a range; *f its flags.
  static bool ExportRange(int64_t type, bool open, uint8_t* f) {
    bool push_pop = type == 59 || type == 70;                 // NvtxPushPopRange, NVTXT's
    if (!push_pop && type != 60 && type != 71) return false;  // (not a range: a mark, a domain's creation ...)
    *f = static_cast<uint8_t>((open ? kOpen : 0) | (push_pop ? kPushPop : 0));
    return true;
  }
  // The pid and tid of a globalTid (24 bits each).
  static int64_t ExportPid(int64_t global_tid) { return (global_tid >> 24) & 0xFFFFFF; }
  static int64_t ExportTid(int64_t global_tid) { return global_tid & 0xFFFFFF; }
  // The index of an export's (domainId, pid) pair (`pairs`, in the order they first come).
  uint32_t Pair(int64_t domain_id, int64_t pid) {
    if (last_pair_ >= 0 && pairs[2 * last_pair_] == domain_id && pairs[2 * last_pair_ + 1] == pid) {
      return static_cast<uint32_t>(last_pair_);  // (the last one again: most rows)
    }
    return FindPair(domain_id, pid);
  }
  // An export's (domainId, pid) pairs, two int64 each, in the order they first came.
  std::vector<int64_t> pairs;
  // The columns' extent at a moment (Mark), to drop what was appended after it (Rollback:
  // an SQLite page scan given up, sqlite_ranges.cc).
  struct Extent {
    size_t ranges, pairs, threads;
    int64_t rows, lowest, highest;
  };
  Extent Mark() const { return Extent{size(), pairs.size(), threads.size(), rows, lowest, highest}; }
  void Rollback(const Extent& at);
  // Decodes up to capacity rows of the decoder into the columns; returns how many (0: the
  // segment, or after Finish the open ranges, are done).
  int64_t Collect(Decoder* decoder, int64_t capacity);
  // Names each range: key = dom_map[domain] * (strings + 1) + message; the name is the
  // key's rank among the keys present (name(), in place of the messages: once an input);
  // *keys gets them, ascending.
  void Name(const int64_t* dom_map, int64_t n_dom, int64_t strings, std::vector<int64_t>* keys);

  // A live read's window (watch's: nvtxr_rank_stats_window), kept from one read to the next:
  // Name keeps its domains, Unname gives its messages back (key % (strings + 1)) for the next
  // Name, KeepIf drops the ranges no later step needs.
  bool window = false;
  int64_t named_strings = -1;  // the `strings` of the last Name
  void Unname(const std::vector<int64_t>& keys);
  template <class Keep>
  void KeepIf(Keep keep) {
    size_t k = 0;
    for (size_t i = 0; i < size(); ++i) {
      if (!keep(i)) continue;
      start[k] = start[i];
      end[k] = end[i];
      thread[k] = thread[i];
      message[k] = message[i];
      domain[k] = domain[i];
      flags[k] = flags[i];
      ++k;
    }
    for (auto* v : {&start, &end}) v->resize(k);
    for (auto* v : {&thread, &message, &domain}) v->resize(k);
    flags.resize(k);
  }
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_RANGE_COLUMNS_H_
