// The steps of one process of `nvtx-tf analyze`'s mapper (rank_stats.h) and each step's
// exclusive and inclusive work per range name (mapper._step_work): a template over how the
// process's ranges are listed (AllRows or a vector of indexes) and the width of the parents
// (range_parents.h), so in a header.
#ifndef NVTX_PLUGINS_TF_READER_STEP_WORK_H_
#define NVTX_PLUGINS_TF_READER_STEP_WORK_H_

#include <stddef.h>
#include <stdint.h>

#include <algorithm>
#include <vector>

#include "reader/range_columns.h"
#include "reader/range_parents.h"
#include "reader/rank_stats.h"

namespace nvtx_reader {

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

// The steps of one process and their exclusive and inclusive work per name (mapper._step_work):
// a range's cover of a step counts for its name in both; in the exclusive, less for its parent's.
// with_incl false: no inclusive work (only compare's tables use it): out->step_incl stays empty.
// longest_floor: a duration the longest step is at least (a live read's steps before its window).
template <class Rows, class P>
void StepWork(const RangeColumns& c, const Rows& mine, const uint8_t* is_step, int64_t n_names,
              const std::vector<P>& parent, const std::vector<int64_t>& row_of_name, bool with_incl, RankStats* out,
              std::vector<int64_t>* scratch, int64_t longest_floor) {
  std::vector<int64_t>& steps = *scratch;
  steps.clear();
  // the names of the ranges inside, as columns 0, 1, ... (the steps' own names are many)
  std::vector<int64_t> column(n_names, -1), names;
  for (int64_t i : mine) {
    if (!IsClosed(c, i)) continue;
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
  // (a live read's window: the longest of the steps before it, longest_floor, counts too)
  int64_t longest = std::max(longest_floor, ends[0] - starts[0]);
  for (int64_t k = 0; k < n_steps; ++k) longest = std::max(longest, ends[k] - starts[k]);
  std::vector<int64_t> reach(n_steps);  // the latest end of the steps up to each one
  for (int64_t k = 0; k < n_steps; ++k) reach[k] = k ? std::max(reach[k - 1], ends[k]) : ends[k];
  int64_t n_columns = static_cast<int64_t>(names.size());
  std::vector<int64_t> covered(n_steps * n_columns, 0);                    // step * n_columns + column -> ns
  std::vector<int64_t> inclusive(with_incl ? n_steps * n_columns : 0, 0);  // (the same, children's time kept)
  std::vector<uint8_t> any(n_columns, 0);  // the names that cover any step (inclusive time: not 0)
  auto is_long = [&](int64_t i) { return c.end[i] - c.start[i] > longest; };
  int64_t base = -1;                  // the last step starting at or before the range
  int64_t last_p = -2, last_up = -1;  // the last range's parent and its `up` (siblings: the same)
  // the closed ranges that are not steps (not listed: as many as the ranges)
  for (int64_t r : mine) {
    if (!IsClosed(c, r) || is_step[c.name()[r]]) continue;
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
      any[name] = 1;
      if (with_incl) inclusive[k * n_columns + name] += cover;
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
  // the names that cover any step, ascending (as the numpy path's columns: their inclusive time
  // is not 0, a sum of positive covers; a range's children never cover more of a step than it
  // does: its exclusive time is 0 there whenever its inclusive is)
  std::vector<int64_t> used;  // columns, by name
  for (int64_t n = 0; n < n_names; ++n) {
    if (column[n] >= 0 && any[column[n]]) used.push_back(column[n]);
  }
  for (int64_t j : used) out->work_rows.push_back(row_of_name[names[j]]);
  out->step_work.reserve(n_steps * used.size());
  for (int64_t k = 0; k < n_steps; ++k) {
    for (int64_t j : used) out->step_work.push_back(covered[k * n_columns + j]);
  }
  if (!with_incl) return;
  out->step_incl.reserve(n_steps * used.size());
  for (int64_t k = 0; k < n_steps; ++k) {
    for (int64_t j : used) out->step_incl.push_back(inclusive[k * n_columns + j]);
  }
}

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_STEP_WORK_H_
