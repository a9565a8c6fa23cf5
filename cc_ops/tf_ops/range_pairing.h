// Pairs an NvtxStart with its NvtxEnd without a range-id edge.
//
// TensorFlow's executor charges per edge as well as per op, and the int64 range-id edge
// from NvtxStart to NvtxEnd was most of their cost over two plain stateful identities
// (benchmarks/bench_ops.py prints both). Where the Python layer can prove that the end
// runs after its start in the same execution (the end's inputs depend on the start's
// outputs, both in one function graph, nvtx_plugins_tf/ops/_raw.py), the two ops carry a
// `pair` attribute instead, "TOKEN@NODE": TOKEN is unique to the pair in the process,
// NODE the op's node name when it was built. Both kernels find one PairSlot when they are
// built, keyed by TOKEN and by the prefix TensorFlow put before NODE when it inlined the
// function (InlineFunctionBody names copies "CALLER/NODE"), so the copies of an inlined
// function get a slot each. Per execution the start puts its range id under the
// execution's key (step id, frame, iteration) and the end takes it.
//
// Without an NVTX tool and with TensorFlow's profiler off, NvtxStart has no range id to
// hand on (NVTX returns 0, and an end of 0 does nothing): it puts nothing, and the end's
// Take sees an empty slot with two plain loads. This is the production case the per-op
// cost is measured in (benchmarks/bench_ops.py); with a tool, the tool's cost dominates.
//
// Concurrent executions of one function have distinct step ids or frames, so they never
// take each other's ids; the one exception is two concurrent non-inlined calls of one
// function inside one step (they share the caller's step id): their ranges still each
// end exactly once, possibly with each other's end time. A slot holds the last kCapacity
// ids not yet taken: an execution aborted between start and end leaves one behind until
// later executions push it out (its range stays open, as it would with the edge).
#ifndef NVTX_PLUGINS_TF_RANGE_PAIRING_H_
#define NVTX_PLUGINS_TF_RANGE_PAIRING_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"

namespace nvtx_tf {

class PairSlot {
 public:
  // Remembers `id` for the execution `key`.
  void Put(uint64_t key, uint64_t id);
  // Takes the id remembered for `key`; false when there is none (its start did not run,
  // or had no id to put).
  bool Take(uint64_t key, uint64_t* id);
  // False until the first Put in the process, in any slot: until then an end need not look
  // at its slot (one load of a line every end shares, instead of one of its own slot's).
  static bool AnyPut() { return any_put_.load(std::memory_order_relaxed); }

 private:
  static std::atomic<bool> any_put_;

  // Under mu_: writes the entry at next_ (over the oldest, which then ages out).
  void PushToRing(uint64_t key, uint64_t id);

  // One execution at a time (the usual case) uses the first entry, with one atomic
  // read-modify-write on each side; more at once go to the ring, under the mutex.
  static constexpr uint64_t kFree = 0, kWriting = 1;  // (an execution key is never 0 or 1)
  std::atomic<uint64_t> first_key_{kFree};
  uint64_t first_id_ = 0;

  static constexpr int kCapacity = 32;
  struct Entry {
    uint64_t key = kFree;
    uint64_t id = 0;
  };
  std::mutex mu_;
  std::atomic<int> ring_entries_{0};  // entries in the ring: Take skips the lock at 0
  Entry ring_[kCapacity];
  int next_ = 0;            // where the next Put writes (the oldest entry)
  uint64_t stale_key_ = 0;  // the first entry's key as the ring's Puts saw it, and for how many
  int stale_puts_ = 0;
};

// The slot of the kernel being built from `pair` ("TOKEN@NODE"; empty: none) and its
// node name; null for an empty `pair`.
std::shared_ptr<PairSlot> PairSlotFor(const std::string& pair, const std::string& node_name);

// The key of the current execution of the op: step id, frame and iteration; never 0 or 1.
uint64_t ExecutionKey(tensorflow::OpKernelContext* ctx);

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_RANGE_PAIRING_H_
