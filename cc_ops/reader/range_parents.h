// Each push/pop range's parent in `nvtx-tf analyze`'s mapper (rank_stats.h): thread by
// thread, the last earlier range a level up, by mapper._parents' rule (its order: start, end
// descending, read order), worked out as the ranges come when they nest strictly or come in
// that order, else after sorting them.
#ifndef NVTX_PLUGINS_TF_READER_RANGE_PARENTS_H_
#define NVTX_PLUGINS_TF_READER_RANGE_PARENTS_H_

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <vector>

#include "reader/range_columns.h"

namespace nvtx_reader {

// A push/pop range where the nesting is worked out: its times and its index.
struct NestItem {
  int64_t start, end, index;
};

// The range i of the columns is closed (it has an end).
inline bool IsClosed(const RangeColumns& c, size_t i) { return (c.flags[i] & RangeColumns::kOpen) == 0; }

// (*parents)[i]: the parent of the push/pop range i (-1: none, and for the others);
// `threads`: memory kept from one input to the next (a vector of ranges per thread). The
// parents are 4 bytes when the ranges are fewer than 2**31, else 8.
void Parents(const RangeColumns& c, std::vector<int32_t>* parents, std::deque<std::vector<NestItem>>* threads);
void Parents(const RangeColumns& c, std::vector<int64_t>* parents, std::deque<std::vector<NestItem>>* threads);

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_RANGE_PARENTS_H_
