#include "reader/range_columns.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>

#include "reader/decoder.h"

namespace nvtx_reader {

void RangeColumns::Reserve(size_t n) {
  start.reserve(n);
  end.reserve(n);
  thread.reserve(n);
  message.reserve(n);
  domain.reserve(n);
  flags.reserve(n);
}

void RangeColumns::Clear() {
  start.clear();
  end.clear();
  thread.clear();
  threads.clear();
  thread_index_.clear();
  message.clear();
  domain.clear();
  flags.clear();
  pairs.clear();
  pair_index_.clear();
  last_pair_ = -1;
  lowest = std::numeric_limits<int64_t>::max();
  highest = std::numeric_limits<int64_t>::min();
  rows = 0;
}

void RangeColumns::Rollback(const Extent& at) {
  start.resize(at.ranges);
  end.resize(at.ranges);
  thread.resize(at.ranges);
  message.resize(at.ranges);
  domain.resize(at.ranges);
  flags.resize(at.ranges);
  pairs.resize(at.pairs);
  uint32_t kept = static_cast<uint32_t>(at.pairs / 2);
  for (auto it = pair_index_.begin(); it != pair_index_.end();) {
    it = it->second >= kept ? pair_index_.erase(it) : std::next(it);
  }
  last_pair_ = -1;
  threads.resize(at.threads);
  for (auto it = thread_index_.begin(); it != thread_index_.end();) {
    it = it->second >= at.threads ? thread_index_.erase(it) : std::next(it);
  }
  last_thread_ = 0;
  rows = at.rows;
  lowest = at.lowest;
  highest = at.highest;
}

void RangeColumns::AddRows(const NvtxrRow* r, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const NvtxrRow& row = r[i];
    bool open = (row.flags & kNvtxrUnclosed) != 0;
    lowest = std::min(lowest, row.start_ns);
    highest = std::max(highest, row.start_ns);
    if (row.kind == kNvtxrMark) continue;
    if (!open) highest = std::max(highest, row.end_ns);
    if (row.kind != kNvtxrPushPop && row.kind != kNvtxrStartEnd) continue;
    Append(row.start_ns, row.end_ns, row.pid, row.tid, row.message, row.domain,
           static_cast<uint8_t>((open ? kOpen : 0) | (row.kind == kNvtxrPushPop ? kPushPop : 0)));
  }
  rows += n;
}

uint32_t RangeColumns::FindThread(int64_t p, int64_t t) {
  auto ins = thread_index_.emplace(std::make_pair(p, t), static_cast<uint32_t>(threads.size()));
  if (ins.second) threads.push_back(Thread{p, t});
  return last_thread_ = ins.first->second;
}

uint32_t RangeColumns::FindPair(int64_t domain_id, int64_t pid) {
  auto ins = pair_index_.emplace(std::make_pair(domain_id, pid), static_cast<uint32_t>(pairs.size() / 2));
  if (ins.second) {
    pairs.push_back(domain_id);
    pairs.push_back(pid);
  }
  last_pair_ = ins.first->second;
  return static_cast<uint32_t>(last_pair_);
}

bool RangeColumns::AddExportRow(int64_t s, int64_t e, bool open, int64_t type, int64_t global_tid, int64_t domain_id,
                                uint32_t msg) {
  uint8_t f;
  if (!ExportRange(type, open, &f)) return false;
  int64_t pid = ExportPid(global_tid);
  Append(s, open ? -1 : e, pid, ExportTid(global_tid), msg, Pair(domain_id, pid), f);
  return true;
}

int64_t RangeColumns::AddExportRows(int64_t n, const int64_t* s, const int64_t* e, const uint8_t* e_valid,
                                    int64_t e_offset, const int64_t* event_type, const int64_t* global_tid,
                                    const int64_t* domain_id, const int32_t* msg) {
  // a block of ranges at a time gathered here, then appended to each column at once (not
  // a range's seven values to seven columns, each checking its room)
  constexpr int64_t kBlock = 256;
  int64_t bs[kBlock], be[kBlock];
  uint32_t bt[kBlock], bm[kBlock], bd[kBlock];
  uint8_t bf[kBlock];
  int64_t added = 0;
  for (int64_t at = 0; at < n; at += kBlock) {
    int64_t k = 0, stop = std::min(n, at + kBlock);
    for (int64_t i = at; i < stop; ++i) {
      uint64_t bit = static_cast<uint64_t>(e_offset + i);
      bool open = e_valid != nullptr && ((e_valid[bit >> 3] >> (bit & 7)) & 1) == 0;
      if (!ExportRange(event_type[i], open, &bf[k])) continue;
      int64_t pid = ExportPid(global_tid[i]);
      bs[k] = s[i];
      be[k] = open ? -1 : e[i];
      bt[k] = ThreadOf(pid, ExportTid(global_tid[i]));
      bm[k] = static_cast<uint32_t>(msg[i]);
      bd[k] = Pair(domain_id[i], pid);
      ++k;
    }
    start.insert(start.end(), bs, bs + k);
    end.insert(end.end(), be, be + k);
    thread.insert(thread.end(), bt, bt + k);
    message.insert(message.end(), bm, bm + k);
    domain.insert(domain.end(), bd, bd + k);
    flags.insert(flags.end(), bf, bf + k);
    added += k;
  }
  rows += n;
  return added;
}

void RangeColumns::Unname(const std::vector<int64_t>& keys) {
  const int64_t width = named_strings + 1;
  for (size_t i = 0; i < size(); ++i) message[i] = static_cast<uint32_t>(keys[message[i]] % width);
}

int64_t RangeColumns::Collect(Decoder* decoder, int64_t capacity) { return decoder->NextRanges(this, capacity); }

void RangeColumns::Name(const int64_t* dom_map, int64_t n_dom, int64_t strings, std::vector<int64_t>* keys) {
  // the (domain, message) pairs are few: each range's pair numbered in a table of the pairs
  // (direct when domains x strings is small, else hashed)
  std::vector<int64_t> pair_key;
  uint32_t max_domain = 0, max_message = 0;
  for (size_t i = 0; i < size(); ++i) {
    max_domain = std::max(max_domain, domain[i]);
    max_message = std::max(max_message, message[i]);
  }
  auto key_of = [&](size_t i) {
    int64_t d = n_dom > 0 ? dom_map[std::min<int64_t>(domain[i], n_dom - 1)] : 0;
    return d * (strings + 1) + message[i];
  };
  uint64_t cells = (uint64_t(max_domain) + 1) * (uint64_t(max_message) + 1);
  if (cells <= (uint64_t(1) << 22)) {
    std::vector<int32_t> table(cells, -1);
    for (size_t i = 0; i < size(); ++i) {
      int32_t& cell = table[uint64_t(domain[i]) * (max_message + 1) + message[i]];
      if (cell < 0) {
        cell = static_cast<int32_t>(pair_key.size());
        pair_key.push_back(key_of(i));
      }
      message[i] = static_cast<uint32_t>(cell);  // (each range's pair, then its name: in place)
    }
  } else {
    std::unordered_map<uint64_t, int32_t> pair_index;
    for (size_t i = 0; i < size(); ++i) {
      auto ins = pair_index.emplace((uint64_t(domain[i]) << 32) | message[i], static_cast<int32_t>(pair_key.size()));
      if (ins.second) pair_key.push_back(key_of(i));
      message[i] = static_cast<uint32_t>(ins.first->second);
    }
  }
  *keys = pair_key;
  std::sort(keys->begin(), keys->end());
  keys->erase(std::unique(keys->begin(), keys->end()), keys->end());
  std::vector<int32_t> rank(pair_key.size());
  for (size_t p = 0; p < pair_key.size(); ++p) {
    rank[p] = static_cast<int32_t>(std::lower_bound(keys->begin(), keys->end(), pair_key[p]) - keys->begin());
  }
  for (size_t i = 0; i < size(); ++i) message[i] = static_cast<uint32_t>(rank[message[i]]);
  named_strings = strings;
  if (size() > (size_t(1) << 22) && !window) {  // (a large input: its 4 bytes a range not held while it is mapped)
    std::vector<uint32_t>().swap(domain);
  }
}

}  // namespace nvtx_reader
