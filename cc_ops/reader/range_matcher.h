// Pairs begin and end events into ranges, per process (a range pushed in one segment of
// a process and popped in the next is one range): the push/pop stacks per (thread,
// domain), the start/end ranges still open, and the ends seen before their start (a
// range ended on another thread whose chunk was decoded first). Memory: the open ranges.
#ifndef NVTX_PLUGINS_TF_READER_RANGE_MATCHER_H_
#define NVTX_PLUGINS_TF_READER_RANGE_MATCHER_H_

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <unordered_map>
#include <vector>

#include "reader/decode.h"

namespace nvtx_reader {

class RangeMatcher {
 public:
  explicit RangeMatcher(NvtxrStats& stats) : stats_(stats) {}

  // Each call is for process `proc` (Tables::Process numbering); `stack` names a
  // (thread, domain) stack. Those returning bool return true when *out got a row.
  void Push(int proc, uint64_t stack, NvtxrRow begin);
  bool Pop(int proc, uint64_t stack, int64_t ts, int64_t tid, NvtxrRow* out);
  bool Start(int proc, NvtxrRow begin, NvtxrRow* out);
  bool End(int proc, uint64_t range_id, int64_t ts, int64_t tid, NvtxrRow* out);

  // Appends every range still open (kNvtxrUnclosed, end_ns = -1) to *out, counts the
  // ends whose start never came, and forgets both.
  void TakeOpen(std::vector<NvtxrRow>* out);

 private:
  struct EarlyEnd {
    int64_t ts;
    int64_t tid;
  };
  struct ProcessRanges {
    std::unordered_map<uint64_t, std::vector<NvtxrRow>> stacks;  // thread key << 16 | domain
    std::unordered_map<uint64_t, NvtxrRow> open_starts;          // by range id
    std::unordered_map<uint64_t, EarlyEnd> early_ends;           // by range id
  };
  ProcessRanges& At(int proc);
  // The stack of (proc, stack), created on first use; the last one is remembered (a
  // thread's events come in runs of one stack).
  std::vector<NvtxrRow>& Stack(int proc, uint64_t stack);

  NvtxrStats& stats_;
  std::deque<ProcessRanges> procs_;
  int last_proc_ = -1;
  uint64_t last_stack_ = 0;
  std::vector<NvtxrRow>* last_ = nullptr;
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_RANGE_MATCHER_H_
