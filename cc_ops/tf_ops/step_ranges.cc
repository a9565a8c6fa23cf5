#include "tf_ops/step_ranges.h"

#include <mutex>
#include <string>
#include <unordered_map>

#include "tensorflow/core/framework/resource_mgr.h"
#include "tf_ops/trace_me_bridge.h"

namespace nvtx_tf {
namespace {

constexpr char kResourceName[] = "nvtx_plugins_tf_open_step_ranges";

class OpenStepRanges : public tensorflow::ResourceBase {
 public:
  ~OpenStepRanges() override {
    for (const auto& [id, domain] : open_) {
      nvtxDomainRangeEnd(domain, id);
      TraceMeRangeEnded(id);
    }
  }
  std::string DebugString() const override { return "NVTX ranges open in this step"; }

  void Add(nvtxDomainHandle_t domain, uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    open_[id] = domain;
  }
  bool Remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.erase(id) > 0;
  }

 private:
  std::mutex mu_;
  std::unordered_map<uint64_t, nvtxDomainHandle_t> open_;
};

absl::Status Lookup(tensorflow::OpKernelContext* ctx, OpenStepRanges** out) {
  tensorflow::ScopedStepContainer* step = ctx->step_container();
  if (step == nullptr || ctx->resource_manager() == nullptr) {
    *out = nullptr;
    return absl::OkStatus();
  }
  return step->LookupOrCreate<OpenStepRanges>(ctx->resource_manager(), kResourceName, out,
                                              [](OpenStepRanges** created) {
                                                *created = new OpenStepRanges;
                                                return absl::OkStatus();
                                              });
}

}  // namespace

absl::Status RegisterStepRange(tensorflow::OpKernelContext* ctx, nvtxDomainHandle_t domain, uint64_t id) {
  OpenStepRanges* ranges = nullptr;
  absl::Status status = Lookup(ctx, &ranges);
  if (!status.ok() || ranges == nullptr) return status;
  ranges->Add(domain, id);
  ranges->Unref();
  return absl::OkStatus();
}

bool ForgetStepRange(tensorflow::OpKernelContext* ctx, uint64_t id) {
  OpenStepRanges* ranges = nullptr;
  if (!Lookup(ctx, &ranges).ok() || ranges == nullptr) return true;
  bool removed = ranges->Remove(id);
  ranges->Unref();
  return removed;
}

}  // namespace nvtx_tf
