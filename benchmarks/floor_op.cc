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
