// Op registrations (interfaces and shape functions) of the NVTX ops. Kernels live in
// nvtx_kernels.cc. All three ops are identities on their tensor inputs and are
// stateful, so Grappler never folds, deduplicates, prunes or reorders them.
//
// Tensors pass in two lists: `inputs` (device memory on GPU) and `host_inputs` (host
// memory on GPU: int32, string, resource and other host-resident dtypes, following the
// convention TensorFlow's own Identity kernels use). The Python wrapper splits a
// nested structure into the two lists and puts it back together.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace nvtx_tf {
namespace {

using ::tensorflow::shape_inference::InferenceContext;

// Outputs [0, n) mirror inputs [0, n); one more scalar output when `with_id`.
absl::Status PassThroughShapes(InferenceContext* c, int n, bool with_id) {
  for (int i = 0; i < n; ++i) c->set_output(i, c->input(i));
  if (with_id) c->set_output(n, c->Scalar());
  return absl::OkStatus();
}

int NumPassThrough(InferenceContext* c) {
  std::vector<::tensorflow::DataType> t, host;
  if (!c->GetAttr("T", &t).ok() || !c->GetAttr("Thost", &host).ok()) return 0;
  return static_cast<int>(t.size() + host.size());
}

}  // namespace

REGISTER_OP("NvtxStart")
    .Input("inputs: T")
    .Input("host_inputs: Thost")
    .Input("payload: num_payload * int64")
    .Output("outputs: T")
    .Output("host_outputs: Thost")
    .Output("range_id: int64")
    .Attr("T: list(type) >= 0")
    .Attr("Thost: list(type) >= 0")
    .Attr("num_payload: int >= 0 = 0")
    .Attr("message: string")
    .Attr("domain_name: string = ''")
    .Attr("color: int = 0")
    .Attr("category: int = 0")
    .Attr("close_at_step_end: bool = false")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), true); })
    .Doc(R"doc(
Opens an NVTX start/end range named `message` in `domain_name` when it executes and
passes its tensors through unchanged. `range_id` identifies the range for NvtxEnd.
color: ARGB color, 0 for none. category: NVTX category, 0 for none.
payload: at most one int64 scalar attached to the range as its payload.
close_at_step_end: end the range when the session step ends unless NvtxEnd did.
)doc");

REGISTER_OP("NvtxEnd")
    .Input("inputs: T")
    .Input("host_inputs: Thost")
    .Input("range_id: int64")
    .Output("outputs: T")
    .Output("host_outputs: Thost")
    .Attr("T: list(type) >= 0")
    .Attr("Thost: list(type) >= 0")
    .Attr("domain_name: string = ''")
    .Attr("close_at_step_end: bool = false")
    .Attr("grad_message: string = ''")
    .Attr("grad_domain_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), false); })
    .Doc(R"doc(
Ends the NVTX range `range_id` (opened by NvtxStart) when it executes and passes its
tensors through unchanged. An unknown or forged id is handed to NVTX as is: it never
crashes the process. grad_message/grad_domain_name: read by the registered gradient,
which opens the backward range (empty: no backward range).
)doc");

REGISTER_OP("NvtxMark")
    .Input("inputs: T")
    .Input("host_inputs: Thost")
    .Input("payload: num_payload * int64")
    .Output("outputs: T")
    .Output("host_outputs: Thost")
    .Attr("T: list(type) >= 0")
    .Attr("Thost: list(type) >= 0")
    .Attr("num_payload: int >= 0 = 0")
    .Attr("message: string")
    .Attr("domain_name: string = ''")
    .Attr("color: int = 0")
    .Attr("category: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), false); })
    .Doc(R"doc(
Emits an NVTX mark (an instant) named `message` when it executes and passes its tensors
through unchanged.
)doc");

}  // namespace nvtx_tf
