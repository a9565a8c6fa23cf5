#include "reader/range_parents.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <utility>

namespace nvtx_reader {

namespace {

using Order = NestItem;

// (start, end descending, read order): mapper._parents' order of a thread's ranges
bool Before(const Order& a, const Order& b) {
  if (a.start != b.start) return a.start < b.start;
  if (a.end != b.end) return a.end > b.end;
  return a.index < b.index;
}

// One thread's push/pop ranges in that order. They come in the order they ended: each after
// the ranges inside it, otherwise in start order; an insertion sort as they come moves each
// past those inside it only (its depth). When that is far (deep nesting: the moves would grow
// as its square), a sort at the end.
struct ThreadOrder {
  std::vector<Order>& items;  // (RankStatsWork's, empty)
  size_t budget = 1024;       // moves left: 16 a range
  bool sorted = true;

  void Add(const Order& o) {
    budget += 16;
    if (!sorted || items.empty() || !Before(o, items.back())) {  // (most: after the last)
      items.push_back(o);
      return;
    }
    // its place in the sorted ranges (binary search over the last budget + 1 only: those
    // are in the cache, and a place before them is too far), the ranges after it moved up
    // at once
    size_t window = std::min(items.size(), budget + 1);
    auto at = std::upper_bound(items.end() - window, items.end(), o, Before);
    size_t moves = static_cast<size_t>(items.end() - at);
    // (moves > budget also when the window's first is after it: its place is further back)
    if (moves > budget) {
      sorted = false;  // (sorted at the end)
      items.push_back(o);
      return;
    }
    budget -= moves;
    items.insert(at, o);
  }
  void Finish() {
    if (!sorted) std::sort(items.begin(), items.end(), Before);
  }
};

// mapper._parents' rule over one thread's ranges in (start, end descending, read order)
// order, given one at a time (Add): a range's depth is the number of the earlier ones still
// open after its start, and its parent the last earlier one a level up.
struct OpenRanges {
  // the ends of the earlier ranges still open, descending (nested ranges end in stack
  // order: a new end goes last, the first to close); the last range seen at each depth
  std::vector<int64_t> open_ends, last_at;

  template <class P>
  __attribute__((always_inline)) inline void Add(const Order& it, std::vector<P>* parent) {
    (*parent)[it.index] = -1;
    while (!open_ends.empty() && open_ends.back() <= it.start) open_ends.pop_back();
    size_t depth = open_ends.size();
    if (depth > 0 && depth - 1 < last_at.size()) (*parent)[it.index] = static_cast<P>(last_at[depth - 1]);
    if (last_at.size() <= depth) last_at.resize(depth + 1, -1);
    last_at[depth] = it.index;
    if (open_ends.empty() || it.end <= open_ends.back()) {  // (most: inside the last one open)
      open_ends.push_back(it.end);
    } else {
      open_ends.insert(std::upper_bound(open_ends.begin(), open_ends.end(), it.end, std::greater<int64_t>()), it.end);
    }
  }
};

// The parents of one thread's ranges `sorted` (ThreadOrder's, finished).
template <class P>
void ThreadParents(const std::vector<Order>& sorted, std::vector<P>* parent) {
  OpenRanges open;
  for (const Order& it : sorted) open.Add(it, parent);
}

// The same parents as the ranges come, when they nest strictly: no two starting together,
// none overlapping another without being inside it, none of no length at its parent's end.
// Then the ranges ended before x and inside it, not yet given a parent (`roots`: disjoint,
// by start), are x's children (its parent is the innermost range around it: the first to
// end after it), and the rule above gives the same. False when x does not nest so (the
// parents written so far are then overwritten by ThreadParents).
template <class P>
bool NestStep(std::vector<Order>* roots, const Order& x, std::vector<P>* parent) {
  while (!roots->empty()) {
    const Order& r = roots->back();
    if (r.start <= x.start) break;
    if (r.end > x.end || r.start >= x.end) return false;  // (not inside x, or of no length at its end)
    (*parent)[r.index] = static_cast<P>(x.index);
    roots->pop_back();
  }
  if (!roots->empty()) {
    const Order& r = roots->back();
    if (r.start == x.start || r.end > x.start) return false;  // (starting together, or overlapping)
  }
  roots->push_back(x);
  return true;
}

// One thread's ways of giving its ranges their parents as they come: NestStep while they
// nest strictly (a recording's: each range after those inside it), OpenRanges while they
// come in its order (an export's: by start). Either, while it holds, gives the rule's
// parents; NestStep writes a range's parent when its parent comes, OpenRanges when the
// range comes, so a range NestStep leaves without one (a root) may hold OpenRanges'.
struct ThreadWays {
  bool nest = true, in_order = true;
  Order last{0, 0, -1};  // the thread's last range (in_order's check)
  OpenRanges open;
};

// Each push/pop range's parent (mapper._parents), thread by thread: as they come
// (ThreadWays), or for a thread whose ranges neither nest strictly nor come in order, by
// ThreadParents once they are sorted. -1: none.
// (P: int32_t when the ranges are fewer than 2**31, else int64_t)
template <class P>
void ParentsOf(const RangeColumns& c, std::vector<P>* parents, std::deque<std::vector<NestItem>>* threads) {
  std::vector<P>& parent = *parents;
  parent.assign(c.size(), -1);
  std::unordered_map<uint64_t, size_t> seen;             // by mapper.py's thread key: pid * 2**24 + tid
  std::vector<ThreadWays> ways;                          // per thread
  std::vector<int64_t> of_column(c.threads.size(), -1);  // the thread of each of the columns' threads
  // (the thread of range i, numbered as they first come; inlined, as OpenRanges::Add: once a range)
  auto thread_of = [&](size_t i) __attribute__((always_inline)) {
    int64_t& t = of_column[c.thread[i]];
    if (t < 0) {
      const RangeColumns::Thread& pt = c.threads[c.thread[i]];
      uint64_t key = static_cast<uint64_t>(pt.pid) * (uint64_t(1) << 24) + static_cast<uint64_t>(pt.tid);
      auto it = seen.find(key);
      if (it == seen.end()) {
        if (threads->size() <= seen.size()) threads->emplace_back();
        (*threads)[seen.size()].clear();
        ways.emplace_back();
        it = seen.emplace(key, seen.size()).first;
      }
      t = static_cast<int64_t>(it->second);
    }
    return static_cast<size_t>(t);
  };
  auto nested = [&](size_t i) { return IsClosed(c, i) && (c.flags[i] & RangeColumns::kPushPop); };
  bool any_sorting = false;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!nested(i)) continue;
    size_t t = thread_of(i);
    ThreadWays& w = ways[t];
    Order x{c.start[i], c.end[i], static_cast<int64_t>(i)};
    if (w.in_order) {  // (first: where NestStep gives an earlier range its parent, this fails)
      if (w.last.index >= 0 && !Before(w.last, x)) {
        w.in_order = false;
        w.open = OpenRanges();  // (its memory not held)
      } else {
        w.last = x;
        w.open.Add(x, &parent);
      }
    }
    if (w.nest && !NestStep(&(*threads)[t], x, &parent)) {
      w.nest = false;
      (*threads)[t].clear();
    }
    any_sorting |= !w.nest && !w.in_order;
  }
  for (size_t t = 0; t < ways.size(); ++t) {
    // (a root of NestStep's has no parent: OpenRanges' given it before it failed undone)
    if (ways[t].nest && !ways[t].in_order) {
      for (const Order& r : (*threads)[t]) parent[r.index] = -1;
    }
  }
  if (!any_sorting) return;
  // each such thread's ranges put in order as they come, in the room of its NestStep roots
  std::vector<ThreadOrder> orders;
  orders.reserve(ways.size());
  for (size_t t = 0; t < ways.size(); ++t) {
    (*threads)[t].clear();
    orders.push_back(ThreadOrder{(*threads)[t]});
  }
  auto sorting = [&](size_t t) { return !ways[t].nest && !ways[t].in_order; };
  for (size_t i = 0; i < c.size(); ++i) {
    if (!nested(i)) continue;
    size_t t = thread_of(i);
    if (sorting(t)) orders[t].Add(Order{c.start[i], c.end[i], static_cast<int64_t>(i)});
  }
  for (size_t t = 0; t < ways.size(); ++t) {
    if (!sorting(t)) continue;
    orders[t].Finish();
    ThreadParents((*threads)[t], &parent);
    if ((*threads)[t].size() > (size_t(1) << 22)) {  // (a large input's: not held while it is mapped)
      std::vector<Order>().swap((*threads)[t]);
    }
  }
}

}  // namespace

void Parents(const RangeColumns& c, std::vector<int32_t>* parents, std::deque<std::vector<NestItem>>* threads) {
  ParentsOf(c, parents, threads);
}

void Parents(const RangeColumns& c, std::vector<int64_t>* parents, std::deque<std::vector<NestItem>>* threads) {
  ParentsOf(c, parents, threads);
}

}  // namespace nvtx_reader
