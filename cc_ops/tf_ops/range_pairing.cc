// See range_pairing.h.
#include "tf_ops/range_pairing.h"

#include <map>

namespace nvtx_tf {

std::atomic<bool> PairSlot::any_put_{false};

void PairSlot::Put(uint64_t key, uint64_t id) {
  // Relaxed is enough: TensorFlow orders an end after its start, so the end sees this.
  if (!any_put_.load(std::memory_order_relaxed)) any_put_.store(true, std::memory_order_relaxed);
  uint64_t free = kFree;
  if (first_key_.compare_exchange_strong(free, kWriting, std::memory_order_acquire)) {
    first_id_ = id;
    first_key_.store(key, std::memory_order_release);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  PushToRing(key, id);
  // A first entry that outlives kCapacity later executions is most likely left by one that
  // failed between start and end: move it to the ring, where it ages out, and free the
  // first entry for the executions to come.
  const uint64_t held = first_key_.load(std::memory_order_acquire);
  if (held != stale_key_) {
    stale_key_ = held;
    stale_puts_ = 0;
  } else if (held > kWriting && ++stale_puts_ >= kCapacity) {
    uint64_t expected = held;
    if (first_key_.compare_exchange_strong(expected, kWriting, std::memory_order_acquire)) {
      PushToRing(held, first_id_);
      first_key_.store(kFree, std::memory_order_release);
    }
    stale_key_ = kFree;
  }
}

void PairSlot::PushToRing(uint64_t key, uint64_t id) {
  Entry& e = ring_[next_];
  if (e.key == kFree) ring_entries_.fetch_add(1, std::memory_order_relaxed);  // else: the oldest ages out
  e = Entry{key, id};
  next_ = (next_ + 1) % kCapacity;
}

bool PairSlot::Take(uint64_t key, uint64_t* id) {
  if (first_key_.load(std::memory_order_acquire) == key) {
    // No Put writes the first entry while it holds a key. Should a Put be moving it to
    // the ring right now, the exchange fails and the ring (under the mutex) has it.
    const uint64_t found = first_id_;
    uint64_t expected = key;
    if (first_key_.compare_exchange_strong(expected, kFree, std::memory_order_acq_rel)) {
      *id = found;
      return true;
    }
  }
  // A Put of this execution happened before (TensorFlow orders the end after its start),
  // so a ring entry it made is counted here.
  if (ring_entries_.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  for (int k = 1; k <= kCapacity; ++k) {  // newest first: the usual match is the last Put
    Entry& e = ring_[(next_ - k + kCapacity) % kCapacity];
    if (e.key == key) {
      *id = e.id;
      e.key = kFree;
      ring_entries_.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

std::shared_ptr<PairSlot> PairSlotFor(const std::string& pair, const std::string& node_name) {
  if (pair.empty()) return nullptr;
  const size_t at = pair.find('@');
  const std::string token = pair.substr(0, at);
  std::string prefix;
  if (at != std::string::npos) {
    const std::string built_as = pair.substr(at + 1);
    if (node_name.size() >= built_as.size() &&
        node_name.compare(node_name.size() - built_as.size(), built_as.size(), built_as) == 0) {
      prefix = node_name.substr(0, node_name.size() - built_as.size());
    }
  }
  static std::mutex mu;
  static auto* slots = new std::map<std::string, std::weak_ptr<PairSlot>>;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = prefix + '\n' + token;
  auto& weak = (*slots)[key];
  std::shared_ptr<PairSlot> slot = weak.lock();
  if (!slot) weak = slot = std::make_shared<PairSlot>();
  for (auto it = slots->begin(); it != slots->end();) {  // forget the slots of dropped functions
    it = it->second.expired() ? slots->erase(it) : std::next(it);
  }
  return slot;
}

uint64_t ExecutionKey(tensorflow::OpKernelContext* ctx) {
  const tensorflow::FrameAndIter fi = ctx->frame_iter();
  uint64_t k = static_cast<uint64_t>(ctx->step_id()) * 0x9E3779B97F4A7C15ull;
  k ^= fi.frame_id + 0x632BE59BD9B4E019ull + (k << 6) + (k >> 2);
  k ^= static_cast<uint64_t>(fi.iter_id) + 0x632BE59BD9B4E019ull + (k << 6) + (k >> 2);
  return k <= 1 ? k + 2 : k;
}

}  // namespace nvtx_tf
