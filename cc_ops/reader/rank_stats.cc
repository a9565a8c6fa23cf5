#include "reader/rank_stats.h"

#include <math.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <unordered_map>
#include <utility>

#include "reader/range_parents.h"
#include "reader/step_work.h"

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

// Per name of the closed ranges of one process (`mine`: their indexes, a vector or
// AllRows): mapper._range_stats; out->open_ranges counts the others.
template <class Rows>
void NameStats(const RangeColumns& c, const Rows& mine, int64_t n_names, const SketchBuckets& b, RankStats* out,
               std::vector<int64_t>* row_of_name, RankStatsWork* work) {
  std::vector<int64_t> at(n_names + 1, 0);  // counting sort by name
  for (int64_t i : mine) {
    if (IsClosed(c, i)) {
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
    if (IsClosed(c, i)) d[fill[c.name()[i]]++] = c.end[i] - c.start[i];
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

// NameStats without the statistics: the names of the process's closed ranges (rows,
// ascending) and its open ranges, all that the steps' work needs.
template <class Rows>
void NameRows(const RangeColumns& c, const Rows& mine, int64_t n_names, RankStats* out,
              std::vector<int64_t>* row_of_name) {
  row_of_name->assign(n_names, -1);
  for (int64_t i : mine) {
    if (IsClosed(c, i)) {
      (*row_of_name)[c.name()[i]] = 0;
    } else {
      out->open_ranges++;
    }
  }
  for (int64_t n = 0; n < n_names; ++n) {
    if ((*row_of_name)[n] < 0) continue;
    (*row_of_name)[n] = static_cast<int64_t>(out->rows.size());
    out->rows.push_back(n);
  }
}

}  // namespace

std::vector<RankStats> ComputeRankStats(const RangeColumns& c, const uint8_t* is_step, int64_t n_names, bool with_steps,
                                        bool with_incl, bool with_name_stats, const SketchBuckets& buckets,
                                        RankStatsWork* work, int64_t longest_floor) {
  std::vector<int64_t> pids;  // (those of the columns' threads: each has a range)
  for (const RangeColumns::Thread& t : c.threads) pids.push_back(t.pid);
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  // each range's parent: 4 bytes, unless the ranges are too many
  bool narrow = c.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max());
  if (with_steps && narrow) Parents(c, &work->parent, &work->threads);
  if (with_steps && !narrow) Parents(c, &work->wide_parent, &work->threads);
  std::vector<RankStats> out(pids.size());
  std::vector<int64_t> row_of_name;
  auto process = [&](size_t p, const auto& mine) {
    RankStats& r = out[p];
    r.pid = pids[p];
    r.events = static_cast<int64_t>(mine.size());
    if (with_name_stats) {
      NameStats(c, mine, n_names, buckets, &r, &row_of_name, work);
    } else {
      NameRows(c, mine, n_names, &r, &row_of_name);
    }
    if (with_steps && narrow) {
      StepWork(c, mine, is_step, n_names, work->parent, row_of_name, with_incl, &r, &work->steps, longest_floor);
    }
    if (with_steps && !narrow) {
      StepWork(c, mine, is_step, n_names, work->wide_parent, row_of_name, with_incl, &r, &work->steps, longest_floor);
    }
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
