// The mapper of `nvtx-tf analyze` (nvtx_plugins_tf/recorder/analysis/mapper.py) over one
// input's range columns (range_columns.h), in one native pass per process: per range name
// the closed ranges' count, sum, min, max, m2, exact quartiles and quantile-sketch buckets;
// each thread's push/pop nesting (parents); the steps and each step's exclusive and
// inclusive work per name. The rules are mapper.py's numpy code's (its _range_stats, _parents, _step_work),
// ties and all; tests/test_analyze_native.py compares the two value for value.
#ifndef NVTX_PLUGINS_TF_READER_RANK_STATS_H_
#define NVTX_PLUGINS_TF_READER_RANK_STATS_H_

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <vector>

#include "reader/range_columns.h"
#include "reader/range_parents.h"

namespace nvtx_reader {

// The sketch's buckets (nvtx_plugins_tf/recorder/analysis/sketch.py): a duration d > 0 is
// in bucket ceil(log(d) / log_gamma), computed here with libm and then checked against
// bounds[k], the least duration of bucket k by numpy's own log (computed in Python), so
// that both give every duration the same bucket; d <= 0: bucket zero_key.
struct SketchBuckets {
  double log_gamma = 0;
  const int64_t* bounds = nullptr;  // bounds[0] = 1, ascending
  int64_t n_bounds = 0;
  int64_t zero_key = 0;
  float inv_log_gamma = 0;  // 1 / log_gamma (set by the caller), for Key's estimate
  int64_t Key(int64_t d) const;
};

// One process's results: RankResult's columns (mapper.py).
struct RankStats {
  int64_t pid = 0, events = 0, open_ranges = 0;
  std::vector<int64_t> rows;  // the names of its closed ranges, ascending
  std::vector<int64_t> count, sum, min, max;
  std::vector<double> m2, q1, median, q3;
  std::vector<int64_t> sketch_row, sketch_key, sketch_count;
  std::vector<int64_t> step_row, step_start, step_end;  // the recording's clock
  std::vector<int64_t> work_rows;
  std::vector<int64_t> step_work;  // steps x work_rows, row-major: exclusive ns
  std::vector<int64_t> step_incl;  // the same, inclusive of the children's (empty unless asked)
};

// Memory of ComputeRankStats kept from one input to the next (pages the kernel need not
// fault in again): the work arrays of a range each.
struct RankStatsWork {
  std::vector<int32_t> parent;       // each range's (Parents), the ranges fewer than 2**31
  std::vector<int64_t> wide_parent;  // (else)
  std::vector<int64_t> durations, steps, keys, over;
  std::vector<uint32_t> histogram;
  std::vector<std::vector<int64_t>> by_process;
  // per thread: the ranges not yet given a parent (Parents), or all its ranges, sorted
  std::deque<std::vector<NestItem>> threads;  // (a deque: its vectors stay where they are)
};

// The results of every process of `c` (named: RangeColumns::Name), by pid
// ascending. is_step[name]: the range is a step (n_names entries); with_steps false: no
// step chosen (no step columns); with_incl false: step_incl left empty (compare's only);
// with_name_stats false: rows and open_ranges only, the per-name statistics (count to
// sketch_count) left empty (watch's reads). longest_floor: see StepWork (step_work.h).
std::vector<RankStats> ComputeRankStats(const RangeColumns& c, const uint8_t* is_step, int64_t n_names, bool with_steps,
                                        bool with_incl, bool with_name_stats, const SketchBuckets& buckets,
                                        RankStatsWork* work,
                                        int64_t longest_floor = std::numeric_limits<int64_t>::min());

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_RANK_STATS_H_
