// The cost floor for NvtxStart/NvtxEnd: a stateful identity op with the same list
// input/output shape and no NVTX call. TensorFlow's executor charges this much for any
// stateful op (tf.identity is no floor: Grappler prunes it). Built by bench_ops.py.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

REGISTER_OP("FloorIdentity")
    .Input("inputs: T")
    .Output("outputs: T")
    .Attr("T: list(type) >= 0")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

class FloorIdentityOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) ctx->set_output(i, ctx->input(i));
  }
  bool IsExpensive() override { return false; }
};

REGISTER_KERNEL_BUILDER(Name("FloorIdentity").Device(tensorflow::DEVICE_CPU), FloorIdentityOp);

// The same floor with the range-id edge of NvtxStart/NvtxEnd and no NVTX call: FloorStart
// also outputs an int64 scalar (reused per thread, as range_id_pool.h does) that FloorEnd
// takes. It tells the edge's cost apart from the NVTX call's.
REGISTER_OP("FloorStart")
    .Input("inputs: T")
    .Output("outputs: T")
    .Output("range_id: int64")
    .Attr("T: list(type) >= 0")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      c->set_output(c->num_inputs(), c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("FloorEnd")
    .Input("inputs: T")
    .Input("range_id: int64")
    .Output("outputs: T")
    .Attr("T: list(type) >= 0")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 0; i + 1 < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

class FloorStartOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    for (int i = 0; i < n; ++i) ctx->set_output(i, ctx->input(i));
    thread_local tensorflow::Tensor id(tensorflow::DT_INT64, tensorflow::TensorShape({}));
    if (id.RefCountIsOne()) {
      id.scalar<int64_t>()() = 1;
      ctx->set_output(n, id);
      return;
    }
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(n, tensorflow::TensorShape({}), &out));
    out->scalar<int64_t>()() = 1;
  }
  bool IsExpensive() override { return false; }
};

class FloorEndOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    for (int i = 0; i + 1 < ctx->num_inputs(); ++i) ctx->set_output(i, ctx->input(i));
  }
  bool IsExpensive() override { return false; }
};

REGISTER_KERNEL_BUILDER(Name("FloorStart").Device(tensorflow::DEVICE_CPU), FloorStartOp);
REGISTER_KERNEL_BUILDER(Name("FloorEnd").Device(tensorflow::DEVICE_CPU), FloorEndOp);
