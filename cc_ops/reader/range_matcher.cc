#include "reader/range_matcher.h"

namespace nvtx_reader {

RangeMatcher::ProcessRanges& RangeMatcher::At(int proc) {
  size_t k = static_cast<size_t>(proc);
  if (procs_.size() <= k) procs_.resize(k + 1);
  return procs_[k];
}

std::vector<NvtxrRow>& RangeMatcher::Stack(int proc, uint64_t stack) {
  if (last_ == nullptr || proc != last_proc_ || stack != last_stack_) {
    last_ = &At(proc).stacks[stack];  // (an unordered_map's elements stay where they are)
    last_proc_ = proc;
    last_stack_ = stack;
  }
  return *last_;
}

void RangeMatcher::Push(int proc, uint64_t stack, NvtxrRow begin) {
  auto& s = Stack(proc, stack);
  begin.depth = static_cast<int32_t>(s.size());
  begin.end_ns = -1;
  s.push_back(begin);
}

bool RangeMatcher::Pop(int proc, uint64_t stack, int64_t ts, int64_t tid, NvtxrRow* out) {
  auto& s = Stack(proc, stack);
  if (s.empty()) {
    stats_.unmatched_pops++;
    return false;
  }
  *out = s.back();
  s.pop_back();
  out->end_ns = ts;
  out->end_tid = tid;
  return true;
}

bool RangeMatcher::Start(int proc, NvtxrRow begin, NvtxrRow* out) {
  ProcessRanges& pr = At(proc);
  auto early = pr.early_ends.find(begin.range_id);
  if (early != pr.early_ends.end()) {
    begin.end_ns = early->second.ts;
    begin.end_tid = early->second.tid;
    pr.early_ends.erase(early);
    *out = begin;
    return true;
  }
  begin.end_ns = -1;
  auto ins = pr.open_starts.emplace(begin.range_id, begin);
  if (!ins.second) {
    // Reused id while still open: the older one is lost (counted as unclosed).
    NvtxrRow old = ins.first->second;
    ins.first->second = begin;
    old.flags |= kNvtxrUnclosed;
    old.end_ns = -1;
    *out = old;
    stats_.unclosed++;
    return true;
  }
  return false;
}

bool RangeMatcher::End(int proc, uint64_t range_id, int64_t ts, int64_t tid, NvtxrRow* out) {
  ProcessRanges& pr = At(proc);
  auto it = pr.open_starts.find(range_id);
  if (it == pr.open_starts.end()) {
    pr.early_ends[range_id] = EarlyEnd{ts, tid};
    return false;
  }
  *out = it->second;
  pr.open_starts.erase(it);
  out->end_ns = ts;
  out->end_tid = tid;
  return true;
}

void RangeMatcher::TakeOpen(std::vector<NvtxrRow>* out) {
  for (ProcessRanges& pr : procs_) {
    for (auto& kv : pr.stacks) {
      for (NvtxrRow r : kv.second) {
        r.flags |= kNvtxrUnclosed;
        r.end_ns = -1;
        out->push_back(r);
      }
    }
    for (auto& kv : pr.open_starts) {
      NvtxrRow r = kv.second;
      r.flags |= kNvtxrUnclosed;
      r.end_ns = -1;
      out->push_back(r);
    }
    stats_.unmatched_ends += pr.early_ends.size();
    pr.stacks.clear();
    last_ = nullptr;
    pr.open_starts.clear();
    pr.early_ends.clear();
  }
}

}  // namespace nvtx_reader
