// Scalar int64 tensors reused for NvtxStart's range_id output.
//
// Allocating a fresh scalar for every start costs more than the rest of the op (it did
// when measured; benchmarks/bench_ops.py gives the per-op cost of NvtxStart/NvtxEnd over
// a stateful-identity floor). Each thread keeps a few
// scalars; a scalar is reused only when nothing but the pool holds it
// (RefCountIsOne), so a value still in flight is never overwritten. Only the owning
// thread ever adds references to its pool's tensors, so no lock is needed.
#ifndef NVTX_PLUGINS_TF_RANGE_ID_POOL_H_
#define NVTX_PLUGINS_TF_RANGE_ID_POOL_H_

#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace nvtx_tf {

class RangeIdPool {
 public:
  // Sets output `index` of `ctx` to a host int64 scalar holding `id`.
  static void SetOutput(tensorflow::OpKernelContext* ctx, int index, uint64_t id) {
    thread_local RangeIdPool pool;
    for (int k = 0; k < kSize; ++k) {
      tensorflow::Tensor& t = pool.tensors_[(pool.next_ + k) % kSize];
      if (t.RefCountIsOne()) {
        pool.next_ = (pool.next_ + k + 1) % kSize;
        t.scalar<int64_t>()() = static_cast<int64_t>(id);
        ctx->set_output(index, t);
        return;
      }
    }
    tensorflow::AllocatorAttributes host;
    host.set_on_host(true);
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(index, tensorflow::TensorShape({}), &out, host));
    out->scalar<int64_t>()() = static_cast<int64_t>(id);
  }

 private:
  static constexpr int kSize = 16;
  RangeIdPool() {
    for (auto& t : tensors_) t = tensorflow::Tensor(tensorflow::DT_INT64, tensorflow::TensorShape({}));
  }
  tensorflow::Tensor tensors_[kSize];
  int next_ = 0;
};

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_RANGE_ID_POOL_H_
