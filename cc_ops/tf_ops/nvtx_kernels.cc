// Kernels of NvtxStart, NvtxEnd, NvtxMark and the backward NvtxBackwardStart/End (which share
// NvtxStart's and NvtxEnd's kernels; interfaces in nvtx_ops.cc).
//
// Every kernel forwards its inputs to its outputs (no copy) and makes one NVTX call.
// Message, domain, color and category are attributes resolved once when the kernel is
// built; the hot path is: forward tensors, optional payload read, one NVTX call, and for
// NvtxStart one pooled scalar output (range_id_pool.h). Ops run eagerly take message and
// domain as a `text` input instead (read per execution; nvtx_ops.cc says why).
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/types.h"
#include "tf_ops/nvtx_handles.h"
#include "tf_ops/range_id_pool.h"
#include "tf_ops/range_pairing.h"
#include "tf_ops/step_ranges.h"
#include "tf_ops/trace_me_bridge.h"

namespace nvtx_tf {
namespace {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// Forwards inputs [0, n) to outputs [0, n); returns n.
int ForwardInputs(OpKernelContext* ctx, int n) {
  for (int i = 0; i < n; ++i) ctx->set_output(i, ctx->input(i));
  return n;
}

int NumForwarded(OpKernelConstruction* c) {
  std::vector<tensorflow::DataType> t, host;
  if (!c->GetAttr("T", &t).ok() || !c->GetAttr("Thost", &host).ok()) return 0;
  return static_cast<int>(t.size() + host.size());
}

std::atomic<int64_t> kernels_built{0};

// An attribute with a default that graphs saved before it existed lack.
template <typename T>
absl::Status OptionalAttr(OpKernelConstruction* c, const char* name, T* value) {
  return c->HasAttr(name) ? c->GetAttr(name, value) : absl::OkStatus();
}

// The `num_text` of the op being built: 0 (texts are attributes) or at least `needed`.
absl::Status TextCount(OpKernelConstruction* c, int64_t needed, int64_t* num_text) {
  *num_text = 0;
  TF_RETURN_IF_ERROR(OptionalAttr(c, "num_text", num_text));
  if (*num_text != 0 && *num_text < needed) {
    return absl::InvalidArgumentError("NVTX op attribute 'num_text' must be 0 or at least " + std::to_string(needed));
  }
  return absl::OkStatus();
}

// Input `index` (one of the `text` input's string scalars) into `out`; false (and ctx has an
// error) when it is not a string scalar or holds a NUL.
bool ReadText(OpKernelContext* ctx, int index, std::string* out) {
  const Tensor& text = ctx->input(index);
  if (!tensorflow::TensorShapeUtils::IsScalar(text.shape())) {
    ctx->SetStatus(absl::InvalidArgumentError("NVTX op input 'text' must hold string scalars, got shape " +
                                              text.shape().DebugString()));
    return false;
  }
  const tensorflow::tstring& value = text.scalar<tensorflow::tstring>()();
  out->assign(value.data(), value.size());
  if (out->find('\0') != std::string::npos) {
    ctx->SetStatus(absl::InvalidArgumentError("NVTX op input 'text' must not contain NUL"));
    return false;
  }
  return true;
}

// The texts of one execution: the kernel's own, or those of its `text` input.
struct Texts {
  nvtxDomainHandle_t domain = nullptr;
  const std::string* message = nullptr;
  const std::string* domain_name = nullptr;
  std::string message_storage, domain_storage;  // read from the input
};

// Shared by NvtxStart and NvtxMark: the event spec and the optional payload.
//
// Field order is for the hot path: a function of annotated ops runs through many kernels
// and each is cold in the cache, so what Compute reads comes first, together, right after
// OpKernel's own fields (two cache lines instead of three; perf showed the misses on them
// as most of the kernels' own time). The strings TraceMe reads while TensorFlow's
// profiler runs (the message ends EventSpec), and the owners of what the hot fields point
// to, come after.
class EventKernel : public OpKernel {
 public:
  explicit EventKernel(OpKernelConstruction* c) : OpKernel(c), num_forwarded_(NumForwarded(c)) {
    std::string message, domain_name;
    int64_t color = 0, category = 0, num_payload = 0;
    OP_REQUIRES_OK(c, c->GetAttr("message", &message));
    OP_REQUIRES_OK(c, c->GetAttr("domain_name", &domain_name));
    OP_REQUIRES_OK(c, c->GetAttr("color", &color));
    OP_REQUIRES_OK(c, c->GetAttr("category", &category));
    OP_REQUIRES_OK(c, c->GetAttr("num_payload", &num_payload));
    OP_REQUIRES(c, num_payload <= 1, absl::InvalidArgumentError("NVTX op attribute 'num_payload' must be 0 or 1"));
    has_payload_ = num_payload == 1;
    int64_t num_text = 0;
    OP_REQUIRES_OK(c, TextCount(c, 2, &num_text));
    if (num_text != 0) text_input_ = num_forwarded_ + static_cast<int>(num_payload);
    OP_REQUIRES_OK(c, OptionalAttr(c, "emit", &emit_));
    OP_REQUIRES_OK(c, MakeEventSpec(message, domain_name, color, category, &spec_));
    domain_name_ = std::move(domain_name);
    kernels_built.fetch_add(1, std::memory_order_relaxed);
  }
  bool IsExpensive() override { return false; }

 protected:
  // The attributes for this execution: the kernel's own without a payload or a text input,
  // else `scratch` with the payload and the texts set; null (and ctx has an error) on a bad
  // payload or text. `texts` gets the domain, message and domain name to use.
  const nvtxEventAttributes_t* Attributes(OpKernelContext* ctx, nvtxEventAttributes_t* scratch, Texts* texts) {
    texts->domain = spec_.domain;
    texts->message = &spec_.message;
    texts->domain_name = &domain_name_;
    if (!has_payload_ && text_input_ < 0) return &spec_.attributes;
    *scratch = spec_.attributes;
    if (has_payload_) {
      const Tensor& payload = ctx->input(num_forwarded_);
      if (!tensorflow::TensorShapeUtils::IsScalar(payload.shape())) {
        ctx->SetStatus(absl::InvalidArgumentError("NVTX op input 'payload' must be an int64 scalar, got shape " +
                                                  payload.shape().DebugString()));
        return nullptr;
      }
      scratch->payloadType = NVTX_PAYLOAD_TYPE_INT64;
      scratch->payload.llValue = payload.scalar<int64_t>()();
    }
    if (text_input_ >= 0) {
      if (!ReadText(ctx, text_input_, &texts->message_storage) ||
          !ReadText(ctx, text_input_ + 1, &texts->domain_storage)) {
        return nullptr;
      }
      texts->message = &texts->message_storage;
      texts->domain_name = &texts->domain_storage;
      texts->domain = DomainFor(texts->domain_storage);
      scratch->message.ascii = texts->message_storage.c_str();
    }
    return scratch;
  }

  // The payload of this execution as TraceMe metadata (call after Attributes()).
  int64_t Payload(const nvtxEventAttributes_t& attributes) const {
    return has_payload_ ? attributes.payload.llValue : 0;
  }

  // Hot: read on every execution (spec_ begins with the domain and the attributes).
  const int num_forwarded_;
  bool has_payload_ = false;
  bool close_at_step_end_ = false;  // NvtxStart
  bool emit_ = true;                // NvtxStart (NvtxMark has no `emit`)
  int text_input_ = -1;             // index of the first `text` input, -1: texts are attributes
  PairSlot* pair_ = nullptr;        // NvtxStart, when paired with its end (owned by pair_owner_)
  EventSpec spec_;
  // Cold.
  std::shared_ptr<PairSlot> pair_owner_;
  std::string domain_name_;  // for TraceMe (the message is spec_.message)
};

class NvtxStartOp : public EventKernel {
 public:
  explicit NvtxStartOp(OpKernelConstruction* c) : EventKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("close_at_step_end", &close_at_step_end_));
    std::string pair;
    OP_REQUIRES_OK(c, c->GetAttr("pair", &pair));
    pair_owner_ = PairSlotFor(pair, name());
    pair_ = pair_owner_.get();
  }

  void Compute(OpKernelContext* ctx) override {
    if (!emit_) {  // a range around code TensorFlow prunes: nothing to open
      ForwardInputs(ctx, num_forwarded_);
      RangeIdPool::SetOutput(ctx, num_forwarded_, 0);
      return;
    }
    nvtxEventAttributes_t scratch;
    Texts texts;
    const nvtxEventAttributes_t* attributes = Attributes(ctx, &scratch, &texts);
    if (attributes == nullptr) return;
    ForwardInputs(ctx, num_forwarded_);
    const nvtxRangeId_t id = TraceMeRangeStarted(nvtxDomainRangeStartEx(texts.domain, attributes), *texts.message,
                                                 *texts.domain_name, has_payload_, Payload(*attributes));
    if (close_at_step_end_) OP_REQUIRES_OK(ctx, RegisterStepRange(ctx, texts.domain, id));
    if (pair_ != nullptr) {
      if (id != 0) pair_->Put(ExecutionKey(ctx), id);     // 0: no tool, no profiler, nothing to end
      if (!ctx->output_required(num_forwarded_)) return;  // (a backward range's payload uses it)
    }
    RangeIdPool::SetOutput(ctx, num_forwarded_, id);
  }
};

class NvtxMarkOp : public EventKernel {
 public:
  using EventKernel::EventKernel;

  void Compute(OpKernelContext* ctx) override {
    nvtxEventAttributes_t scratch;
    Texts texts;
    const nvtxEventAttributes_t* attributes = Attributes(ctx, &scratch, &texts);
    if (attributes == nullptr) return;
    ForwardInputs(ctx, num_forwarded_);
    nvtxDomainMarkEx(texts.domain, attributes);
    TraceMeMark(*texts.message, *texts.domain_name, has_payload_, Payload(*attributes));
  }
};

class NvtxEndOp : public OpKernel {
 public:
  explicit NvtxEndOp(OpKernelConstruction* c) : OpKernel(c), num_forwarded_(NumForwarded(c)) {
    std::string domain_name;
    OP_REQUIRES_OK(c, c->GetAttr("domain_name", &domain_name));
    if (c->HasAttr("close_at_step_end")) OP_REQUIRES_OK(c, c->GetAttr("close_at_step_end", &close_at_step_end_));
    int64_t num_ids = 1;
    OP_REQUIRES_OK(c, c->GetAttr("num_ids", &num_ids));
    OP_REQUIRES(c, num_ids <= 1, absl::InvalidArgumentError("NVTX op attribute 'num_ids' must be 0 or 1"));
    has_id_input_ = num_ids == 1;
    std::string pair;
    OP_REQUIRES_OK(c, c->GetAttr("pair", &pair));
    OP_REQUIRES(c, has_id_input_ || !pair.empty(),
                absl::InvalidArgumentError("NvtxEnd needs a 'range_id' input or a 'pair' attribute"));
    if (!has_id_input_) pair_owner_ = PairSlotFor(pair, name());
    pair_ = pair_owner_.get();
    int64_t num_text = 0;
    OP_REQUIRES_OK(c, TextCount(c, 1, &num_text));
    if (num_text != 0) text_input_ = num_forwarded_ + (has_id_input_ ? 1 : 0);
    OP_REQUIRES_OK(c, OptionalAttr(c, "emit", &emit_));
    domain_ = DomainFor(domain_name);
    kernels_built.fetch_add(1, std::memory_order_relaxed);
  }
  bool IsExpensive() override { return false; }

  void Compute(OpKernelContext* ctx) override {
    if (!emit_) {  // a range around code TensorFlow prunes: nothing to end
      ForwardInputs(ctx, num_forwarded_);
      return;
    }
    nvtxRangeId_t id = 0;
    if (has_id_input_) {
      const Tensor& range_id = ctx->input(num_forwarded_);
      OP_REQUIRES(ctx, tensorflow::TensorShapeUtils::IsScalar(range_id.shape()),
                  absl::InvalidArgumentError("NvtxEnd input 'range_id' must be an int64 scalar, got shape " +
                                             range_id.shape().DebugString()));
      id = static_cast<nvtxRangeId_t>(range_id.scalar<int64_t>()());
    }
    ForwardInputs(ctx, num_forwarded_);
    if (!has_id_input_ && !TakePaired(ctx, &id)) return;          // its start did not run, or had no id
    if (close_at_step_end_ && !ForgetStepRange(ctx, id)) return;  // already ended at step end
    nvtxDomainHandle_t domain = domain_;
    if (text_input_ >= 0) {
      std::string domain_name;
      if (!ReadText(ctx, text_input_, &domain_name)) return;
      domain = DomainFor(domain_name);
    }
    nvtxDomainRangeEnd(domain, id);
    TraceMeRangeEnded(id);
  }

 private:
  bool TakePaired(OpKernelContext* ctx, nvtxRangeId_t* id) {
    return PairSlot::AnyPut() && pair_->Take(ExecutionKey(ctx), id);
  }

  // Hot first, as in EventKernel.
  const int num_forwarded_;
  bool close_at_step_end_ = false;
  bool has_id_input_ = true;
  bool emit_ = true;
  int text_input_ = -1;       // index of the `text` input ([domain_name, ...]), -1: the attribute
  PairSlot* pair_ = nullptr;  // when there is no range_id input (owned by pair_owner_)
  nvtxDomainHandle_t domain_ = nullptr;
  std::shared_ptr<PairSlot> pair_owner_;
};

// CPU: everything in host memory. GPU: `inputs` stay in device memory (no copy: the
// kernels only forward buffers); `host_inputs` (int32, string, resource: TensorFlow's
// host-memory dtypes, as for its Identity kernels), the payload and the range id live in
// host memory. No CUDA code is involved, so the GPU registrations compile without nvcc;
// they are used when the installed TensorFlow has GPU support and a GPU is present.
#define NVTX_TF_REGISTER_START_KERNELS(op_name)                                       \
  REGISTER_KERNEL_BUILDER(Name(op_name).Device(tensorflow::DEVICE_CPU), NvtxStartOp); \
  REGISTER_KERNEL_BUILDER(Name(op_name)                                               \
                              .Device(tensorflow::DEVICE_GPU)                         \
                              .HostMemory("host_inputs")                              \
                              .HostMemory("host_outputs")                             \
                              .HostMemory("payload")                                  \
                              .HostMemory("range_id"),                                \
                          NvtxStartOp)

#define NVTX_TF_REGISTER_END_KERNELS(op_name)                                       \
  REGISTER_KERNEL_BUILDER(Name(op_name).Device(tensorflow::DEVICE_CPU), NvtxEndOp); \
  REGISTER_KERNEL_BUILDER(Name(op_name)                                             \
                              .Device(tensorflow::DEVICE_GPU)                       \
                              .HostMemory("host_inputs")                            \
                              .HostMemory("host_outputs")                           \
                              .HostMemory("range_id"),                              \
                          NvtxEndOp)

NVTX_TF_REGISTER_START_KERNELS("NvtxStart");
NVTX_TF_REGISTER_START_KERNELS("NvtxBackwardStart");
NVTX_TF_REGISTER_END_KERNELS("NvtxEnd");
NVTX_TF_REGISTER_END_KERNELS("NvtxBackwardEnd");

REGISTER_KERNEL_BUILDER(Name("NvtxMark").Device(tensorflow::DEVICE_CPU), NvtxMarkOp);
REGISTER_KERNEL_BUILDER(Name("NvtxMark")
                            .Device(tensorflow::DEVICE_GPU)
                            .HostMemory("host_inputs")
                            .HostMemory("host_outputs")
                            .HostMemory("payload"),
                        NvtxMarkOp);

}  // namespace
}  // namespace nvtx_tf

// How many NVTX op kernels TensorFlow has built in this process (every op of a graph, and
// one per entry of the eager kernel cache): tests read it to see that a name per eager step
// does not build a kernel per step (ctypes on the loaded library).
extern "C" __attribute__((visibility("default"))) int64_t nvtx_tf_kernels_built() {
  return nvtx_tf::kernels_built.load(std::memory_order_relaxed);
}
