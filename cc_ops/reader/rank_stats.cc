#include "reader/rank_stats.h"

#include <math.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <unordered_map>
#include <utility>

namespace nvtx_reader {

int64_t SketchBuckets::Key(int64_t d) const {
  if (d <= 0) return zero_key;
  int64_t last = n_bounds - 1;
  // an estimate from the float log (a third of the double log's time, within a bucket for
  // any int64), then the bucket by the bounds: numpy's, whatever libm's log gives
  int64_t k = static_cast<int64_t>(ceilf(logf(static_cast<float>(d)) * inv_log_gamma));
  k = std::min(std::max<int64_t>(k, 0), last);
  while (k > 0 && d < bounds[k]) --k;
  while (k < last && d >= bounds[k + 1]) ++k;
  return k;
}

namespace {

// The largest span of durations (max - min + 1) read from a histogram (4 MiB of counts).
constexpr uint64_t kHistogramSpan = uint64_t(1) << 20;

bool Closed(const RangeColumns& c, size_t i) { return (c.flags[i] & RangeColumns::kOpen) == 0; }

// v[lo, hi) reordered so that v[r] is its order statistic r for each of the `nr` ranks (in
// [lo, hi), ascending, distinct): the middle one first (nth_element), then those left and
// right of it in their parts; a rank at its part's start is the part's minimum.
void Select(int64_t* v, int64_t lo, int64_t hi, const int64_t* ranks, int nr) {
  if (nr == 0) return;
  if (hi - lo <= 64) {
    std::sort(v + lo, v + hi);
    return;
  }
  int m = nr / 2;
  int64_t r = ranks[m];
  if (r == lo) {
    std::iter_swap(v + lo, std::min_element(v + lo, v + hi));
  } else {
    std::nth_element(v + lo, v + r, v + hi);
  }
  Select(v, lo, r, ranks, m);
  Select(v, r + 1, hi, ranks + m + 1, nr - m - 1);
}

// The sketch of one name's durations v[0, cnt) (`row`), by value: each one's bucket.
void SketchByValue(const int64_t* v, int64_t cnt, int64_t row, const SketchBuckets& b, RankStats* out,
                   std::vector<int64_t>* scratch) {
  std::vector<int64_t>& keys = *scratch;
  if (cnt <= 512) {
    keys.resize(cnt);
    for (int64_t i = 0; i < cnt; ++i) keys[i] = b.Key(v[i]);
    std::sort(keys.begin(), keys.end());
    for (int64_t i = 0; i < cnt;) {
      int64_t j = i;
      while (j < cnt && keys[j] == keys[i]) ++j;
      out->sketch_row.push_back(row);
      out->sketch_key.push_back(keys[i]);
      out->sketch_count.push_back(j - i);
      i = j;
    }
    return;
  }
  keys.assign(b.n_bounds + 1, 0);  // [0]: the zero bucket, [k + 1]: bucket k
  for (int64_t i = 0; i < cnt; ++i) {
    int64_t k = b.Key(v[i]);
    keys[k == b.zero_key ? 0 : k + 1]++;
  }
  for (int64_t k = 0; k <= b.n_bounds; ++k) {
    if (!keys[k]) continue;
    out->sketch_row.push_back(row);
    out->sketch_key.push_back(k == 0 ? b.zero_key : k - 1);
    out->sketch_count.push_back(keys[k]);
  }
}

// The order statistics `wanted` (ascending, distinct ranks) of v[0, cnt) into value[]
// (in the order of wanted), by selection: v is reordered.
void OrderStatsBySelection(int64_t* v, int64_t cnt, const int64_t* wanted, int nw, int64_t* value) {
  Select(v, 0, cnt, wanted, nw);
  for (int k = 0; k < nw; ++k) value[k] = v[wanted[k]];
}

// Both from a histogram, when the durations are many and most of them in a small span
// (durations of one name are mostly a few distinct values: a count per value, not a log
// and a place in a selection per duration): hist[x - mn] = how many are x, for x in
// [mn, mn + span); `over` (ascending or not) the others, all of them above it, each given
// its bucket and its place in a selection as before. The buckets come in ascending order of
// value, a bucket being the values from its bound to the next one's (SketchBuckets::Key's
// rule, walked instead of computed).
void FromHistogram(const std::vector<uint32_t>& hist, int64_t mn, int64_t span, std::vector<int64_t>* over, int64_t row,
                   const SketchBuckets& b, const int64_t* wanted, int nw, int64_t* value, RankStats* out,
                   std::vector<int64_t>* scratch) {
  int64_t seen = 0, key = 0, bucket = 0, last = b.n_bounds - 1;
  bool have_bucket = false;
  int w = 0;
  auto flush = [&]() {
    if (!have_bucket) return;
    out->sketch_row.push_back(row);
    out->sketch_key.push_back(key);
    out->sketch_count.push_back(bucket);
  };
  auto add = [&](int64_t k, int64_t n) {
    if (have_bucket && k == key) {
      bucket += n;
      return;
    }
    flush();
    key = k;
    bucket = n;
    have_bucket = true;
  };
  for (int64_t x = 0; x < span; ++x) {
    uint32_t n = hist[x];
    if (!n) continue;
    int64_t d = mn + x;
    while (w < nw && wanted[w] < seen + n) value[w++] = d;
    seen += n;
    int64_t k;
    if (d <= 0) {
      k = b.zero_key;
    } else if (have_bucket && key != b.zero_key) {
      k = key;
      while (k < last && d >= b.bounds[k + 1]) ++k;
    } else {
      k = b.Key(d);
    }
    add(k, n);
  }
  if (!over->empty()) {  // (their buckets are the window's last one or above: Key is monotonic)
    std::vector<int64_t>& keys = *scratch;
    keys.resize(over->size());
    for (size_t i = 0; i < over->size(); ++i) keys[i] = b.Key((*over)[i]);
    std::sort(keys.begin(), keys.end());
    for (size_t i = 0; i < keys.size();) {
      size_t j = i;
      while (j < keys.size() && keys[j] == keys[i]) ++j;
      add(keys[i], static_cast<int64_t>(j - i));
      i = j;
    }
    int64_t rest[6];
    for (int k = w; k < nw; ++k) rest[k - w] = wanted[k] - seen;
    OrderStatsBySelection(over->data(), static_cast<int64_t>(over->size()), rest, nw - w, value + w);
  }
  flush();
}

// The histogram of v[0, cnt) over [mn, mn + span), the others into `over`; false (and
// `over` incomplete) when they are more than `most`.
bool Histogram(const int64_t* v, int64_t cnt, int64_t mn, int64_t span, size_t most, std::vector<uint32_t>* hist,
               std::vector<int64_t>* over) {
  hist->assign(static_cast<size_t>(span), 0);
  over->clear();
  uint32_t* h = hist->data();
  for (int64_t i = 0; i < cnt; ++i) {
    uint64_t x = static_cast<uint64_t>(v[i]) - static_cast<uint64_t>(mn);
    if (x < static_cast<uint64_t>(span)) {
      h[x]++;
    } else {
      over->push_back(v[i]);
      if (over->size() > most) return false;
    }
  }
  return true;
}

// Every range of the columns as a list of their indexes (the ranges of an input of one
// process: no list to make).
struct AllRows {
  int64_t n;
  struct It {
    int64_t i;
    int64_t operator*() const { return i; }
    It& operator++() {
      ++i;
      return *this;
    }
    bool operator!=(const It& o) const { return i != o.i; }
  };
  It begin() const { return It{0}; }
  It end() const { return It{n}; }
  size_t size() const { return static_cast<size_t>(n); }
};

// Per name of the closed ranges of one process (`mine`: their indexes, a vector or
// AllRows): mapper._range_stats; out->open_ranges counts the others.
template <class Rows>
void NameStats(const RangeColumns& c, const Rows& mine, int64_t n_names, const SketchBuckets& b, RankStats* out,
               std::vector<int64_t>* row_of_name, RankStatsWork* work) {
  std::vector<int64_t> at(n_names + 1, 0);  // counting sort by name
  for (int64_t i : mine) {
    if (Closed(c, i)) {
      at[c.name()[i] + 1]++;
    } else {
      out->open_ranges++;
    }
  }
  for (int64_t n = 0; n < n_names; ++n) at[n + 1] += at[n];
  std::vector<int64_t>& d = work->durations;
  d.resize(at[n_names]);
  std::vector<int64_t> fill(at.begin(), at.end() - 1);
  for (int64_t i : mine) {
    if (Closed(c, i)) d[fill[c.name()[i]]++] = c.end[i] - c.start[i];
  }
  row_of_name->assign(n_names, -1);
  for (int64_t n = 0; n < n_names; ++n) {
    int64_t lo = at[n], cnt = at[n + 1] - at[n];
    if (cnt == 0) continue;
    int64_t row = static_cast<int64_t>(out->rows.size());
    (*row_of_name)[n] = row;
    out->rows.push_back(n);
    int64_t* v = d.data() + lo;
    uint64_t sum = 0;
    int64_t mn = v[0], mx = v[0];
    for (int64_t i = 0; i < cnt; ++i) {
      sum += static_cast<uint64_t>(v[i]);
      mn = std::min(mn, v[i]);
      mx = std::max(mx, v[i]);
    }
    double mean = static_cast<double>(static_cast<int64_t>(sum)) / static_cast<double>(cnt);
    double part[4] = {0, 0, 0, 0};  // (four sums: no chain of dependent additions)
    int64_t i = 0;
    for (; i + 4 <= cnt; i += 4) {
      for (int j = 0; j < 4; ++j) {
        double x = static_cast<double>(v[i + j]) - mean;
        part[j] += x * x;
      }
    }
    for (; i < cnt; ++i) {
      double x = static_cast<double>(v[i]) - mean;
      part[0] += x * x;
    }
    double m2 = (part[0] + part[1]) + (part[2] + part[3]);
    out->count.push_back(cnt);
    out->sum.push_back(static_cast<int64_t>(sum));
    out->min.push_back(mn);
    out->max.push_back(mx);
    out->m2.push_back(m2);
    // quartiles: numpy's linear interpolation between order statistics lo and lo + 1
    double pos[3], qs[3] = {0.25, 0.5, 0.75};
    int64_t ranks[6];
    for (int q = 0; q < 3; ++q) {
      pos[q] = qs[q] * static_cast<double>(cnt - 1);
      ranks[2 * q] = static_cast<int64_t>(floor(pos[q]));
      ranks[2 * q + 1] = std::min(ranks[2 * q] + 1, cnt - 1);
    }
    int64_t wanted[6], found[6];
    std::copy(ranks, ranks + 6, wanted);
    std::sort(wanted, wanted + 6);
    int nw = static_cast<int>(std::unique(wanted, wanted + 6) - wanted);
    // (unsigned: the span of any two int64 fits)
    uint64_t span = static_cast<uint64_t>(mx) - static_cast<uint64_t>(mn) + 1;
    // a histogram of the whole span when it is small, else of its first cnt / 4 values (at
    // least 4096) when they hold 7 in 8 of the durations
    bool small = span <= static_cast<uint64_t>(cnt) && span <= kHistogramSpan;
    uint64_t window = small ? span : std::min<uint64_t>({span, kHistogramSpan, std::max<uint64_t>(4096, cnt / 4)});
    size_t most = small ? 0 : static_cast<size_t>(cnt / 8);
    if (cnt > 512 && Histogram(v, cnt, mn, static_cast<int64_t>(window), most, &work->histogram, &work->over)) {
      FromHistogram(work->histogram, mn, static_cast<int64_t>(window), &work->over, row, b, wanted, nw, found, out,
                    &work->keys);
    } else {
      SketchByValue(v, cnt, row, b, out, &work->keys);  // (before the selection reorders v)
      OrderStatsBySelection(v, cnt, wanted, nw, found);
    }
    int64_t value[6];
    for (int k = 0; k < 6; ++k) value[k] = found[std::lower_bound(wanted, wanted + nw, ranks[k]) - wanted];
    out->q1.push_back(0);
    out->median.push_back(0);
    out->q3.push_back(0);
    double* dest[3] = {&out->q1.back(), &out->median.back(), &out->q3.back()};
    for (int q = 0; q < 3; ++q) {
      double a = static_cast<double>(value[2 * q]), hi = static_cast<double>(value[2 * q + 1]);
      *dest[q] = a + (hi - a) * (pos[q] - static_cast<double>(ranks[2 * q]));
    }
  }
}

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
void Parents(const RangeColumns& c, std::vector<P>* parents, RankStatsWork* work) {
  std::vector<P>& parent = *parents;
  parent.assign(c.size(), -1);
  std::unordered_map<uint64_t, size_t> threads;          // by mapper.py's thread key: pid * 2**24 + tid
  std::vector<ThreadWays> ways;                          // per thread
  std::vector<int64_t> of_column(c.threads.size(), -1);  // the thread of each of the columns' threads
  // (the thread of range i, numbered as they first come; inlined, as OpenRanges::Add: once a range)
  auto thread_of = [&](size_t i) __attribute__((always_inline)) {
    int64_t& t = of_column[c.thread[i]];
    if (t < 0) {
      const RangeColumns::Thread& pt = c.threads[c.thread[i]];
      uint64_t key = static_cast<uint64_t>(pt.pid) * (uint64_t(1) << 24) + static_cast<uint64_t>(pt.tid);
      auto it = threads.find(key);
      if (it == threads.end()) {
        if (work->threads.size() <= threads.size()) work->threads.emplace_back();
        work->threads[threads.size()].clear();
        ways.emplace_back();
        it = threads.emplace(key, threads.size()).first;
      }
      t = static_cast<int64_t>(it->second);
    }
    return static_cast<size_t>(t);
  };
  auto nested = [&](size_t i) { return Closed(c, i) && (c.flags[i] & RangeColumns::kPushPop); };
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
    if (w.nest && !NestStep(&work->threads[t], x, &parent)) {
      w.nest = false;
      work->threads[t].clear();
    }
    any_sorting |= !w.nest && !w.in_order;
  }
  for (size_t t = 0; t < ways.size(); ++t) {
    // (a root of NestStep's has no parent: OpenRanges' given it before it failed undone)
    if (ways[t].nest && !ways[t].in_order) {
      for (const Order& r : work->threads[t]) parent[r.index] = -1;
    }
  }
  if (!any_sorting) return;
  // each such thread's ranges put in order as they come, in the room of its NestStep roots
  std::vector<ThreadOrder> orders;
  orders.reserve(ways.size());
  for (size_t t = 0; t < ways.size(); ++t) {
    work->threads[t].clear();
    orders.push_back(ThreadOrder{work->threads[t]});
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
    ThreadParents(work->threads[t], &parent);
    if (work->threads[t].size() > (size_t(1) << 22)) {  // (a large input's: not held while it is mapped)
      std::vector<Order>().swap(work->threads[t]);
    }
  }
}

// The steps of one process and their exclusive work per name (mapper._step_work).
template <class Rows, class P>
void StepWork(const RangeColumns& c, const Rows& mine, const uint8_t* is_step, int64_t n_names,
              const std::vector<P>& parent, const std::vector<int64_t>& row_of_name, RankStats* out,
              RankStatsWork* work) {
  std::vector<int64_t>& steps = work->steps;
  steps.clear();
  // the names of the ranges inside, as columns 0, 1, ... (the steps' own names are many)
  std::vector<int64_t> column(n_names, -1), names;
  for (int64_t i : mine) {
    if (!Closed(c, i)) continue;
    uint32_t n = c.name()[i];
    if (is_step[n]) {
      steps.push_back(i);
    } else if (column[n] < 0) {
      column[n] = static_cast<int64_t>(names.size());
      names.push_back(n);
    }
  }
  std::stable_sort(steps.begin(), steps.end(), [&](int64_t a, int64_t b) { return c.start[a] < c.start[b]; });
  int64_t n_steps = static_cast<int64_t>(steps.size());
  for (int64_t s : steps) {
    out->step_row.push_back(row_of_name[c.name()[s]]);
    out->step_start.push_back(c.start[s]);
    out->step_end.push_back(c.end[s]);
  }
  if (n_steps == 0) return;
  const std::vector<int64_t>& starts = out->step_start;
  const std::vector<int64_t>& ends = out->step_end;
  int64_t longest = ends[0] - starts[0];
  for (int64_t k = 0; k < n_steps; ++k) longest = std::max(longest, ends[k] - starts[k]);
  std::vector<int64_t> reach(n_steps);  // the latest end of the steps up to each one
  for (int64_t k = 0; k < n_steps; ++k) reach[k] = k ? std::max(reach[k - 1], ends[k]) : ends[k];
  int64_t n_columns = static_cast<int64_t>(names.size());
  std::vector<int64_t> covered(n_steps * n_columns, 0);  // step * n_columns + column -> ns
  auto is_long = [&](int64_t i) { return c.end[i] - c.start[i] > longest; };
  int64_t base = -1;                  // the last step starting at or before the range
  int64_t last_p = -2, last_up = -1;  // the last range's parent and its `up` (siblings: the same)
  // the closed ranges that are not steps (not listed: as many as the ranges)
  for (int64_t r : mine) {
    if (!Closed(c, r) || is_step[c.name()[r]]) continue;
    int64_t rs = c.start[r], re = c.end[r];
    int64_t name = column[c.name()[r]], p = parent[r];
    // the name the range's time is taken from: its parent's (not a step, nor longer than every step)
    int64_t up = last_up;
    if (p != last_p) {
      up = (p >= 0 && !is_step[c.name()[p]] && !is_long(p)) ? column[c.name()[p]] : -1;
      last_p = p;
      last_up = up;
    }
    bool around_excluded = is_long(r);
    auto add = [&](int64_t k) {
      int64_t s = starts[k], e = ends[k];
      int64_t cover = std::min(re, e) - std::max(rs, s);
      if (around_excluded && rs <= s && re >= e) cover = 0;
      if (cover <= 0) return;
      covered[k * n_columns + name] += cover;
      if (up >= 0) covered[k * n_columns + up] -= cover;
    };
    if (around_excluded) {  // (the epoch around the steps ...): against every step
      for (int64_t k = 0; k < n_steps; ++k) add(k);
      continue;
    }
    // from the last step starting at or before the range, forward while one may overlap,
    // backward while an earlier step may still reach into the range
    // (a thread's ranges come about in time order: the last one's step first)
    if (!(base < n_steps && (base < 0 || starts[base] <= rs) && (base + 1 >= n_steps || starts[base + 1] > rs))) {
      base = static_cast<int64_t>(std::upper_bound(starts.begin(), starts.end(), rs) - starts.begin()) - 1;
    }
    for (int64_t k = std::max<int64_t>(base, 0); k < n_steps && starts[k] < re; ++k) add(k);
    for (int64_t k = base - 1; k >= 0 && reach[k] > rs; --k) add(k);
  }
  // the names that cover any step, ascending (as the numpy path's columns)
  std::vector<uint8_t> any(n_columns, 0);
  for (int64_t k = 0; k < n_steps; ++k) {
    for (int64_t j = 0; j < n_columns; ++j) any[j] |= covered[k * n_columns + j] != 0;
  }
  std::vector<int64_t> used;  // columns, by name
  for (int64_t n = 0; n < n_names; ++n) {
    if (column[n] >= 0 && any[column[n]]) used.push_back(column[n]);
  }
  for (int64_t j : used) out->work_rows.push_back(row_of_name[names[j]]);
  out->step_work.reserve(n_steps * used.size());
  for (int64_t k = 0; k < n_steps; ++k) {
    for (int64_t j : used) out->step_work.push_back(covered[k * n_columns + j]);
  }
}

}  // namespace

std::vector<RankStats> ComputeRankStats(const RangeColumns& c, const uint8_t* is_step, int64_t n_names, bool with_steps,
                                        const SketchBuckets& buckets, RankStatsWork* work) {
  std::vector<int64_t> pids;  // (those of the columns' threads: each has a range)
  for (const RangeColumns::Thread& t : c.threads) pids.push_back(t.pid);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  // each range's parent: 4 bytes, unless the ranges are too many
  bool narrow = c.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max());
  if (with_steps && narrow) Parents(c, &work->parent, work);
  if (with_steps && !narrow) Parents(c, &work->wide_parent, work);
  std::vector<RankStats> out(pids.size());
  std::vector<int64_t> row_of_name;
  auto process = [&](size_t p, const auto& mine) {
    RankStats& r = out[p];
    r.pid = pids[p];
    r.events = static_cast<int64_t>(mine.size());
    NameStats(c, mine, n_names, buckets, &r, &row_of_name, work);
    if (with_steps && narrow) StepWork(c, mine, is_step, n_names, work->parent, row_of_name, &r, work);
    if (with_steps && !narrow) StepWork(c, mine, is_step, n_names, work->wide_parent, row_of_name, &r, work);
  };
  if (pids.size() == 1) {
    process(0, AllRows{static_cast<int64_t>(c.size())});
    return out;
  }
  std::vector<std::vector<int64_t>>& mine = work->by_process;
  if (mine.size() < pids.size()) mine.resize(pids.size());
  for (size_t p = 0; p < pids.size(); ++p) mine[p].clear();
  std::vector<size_t> process_of(c.threads.size());  // of each of the columns' threads
  for (size_t t = 0; t < c.threads.size(); ++t) {
    process_of[t] = std::lower_bound(pids.begin(), pids.end(), c.threads[t].pid) - pids.begin();
  }
  for (size_t i = 0; i < c.size(); ++i) mine[process_of[c.thread[i]]].push_back(static_cast<int64_t>(i));
  for (size_t p = 0; p < pids.size(); ++p) {
    process(p, mine[p]);
    if (p >= 1) std::vector<int64_t>().swap(mine[p]);  // (the first's room is kept)
  }
  return out;
}

}  // namespace nvtx_reader
