// Op registrations (interfaces and shape functions) of the NVTX ops. Kernels live in
// nvtx_kernels.cc. All ops are identities on their tensor inputs.
//
// The forward ops (NvtxStart, NvtxEnd, NvtxMark) are stateful: Grappler never folds,
// deduplicates or prunes them, and a range with no tensor threaded through it still runs.
// The backward ops (NvtxBackwardStart, NvtxBackwardEnd), built by the registered
// gradients, are deliberately *not* stateful: TensorFlow keeps a stateful op alive
// whatever consumes its outputs, so a stateful op on a gradient tensor would make the
// runtime compute gradients it otherwise prunes (a frozen base model's whole backward
// pass). Stateless, they run exactly when the gradient tensors they pass through are
// needed. Each takes a tensor produced by a stateful op (the forward range id, the
// backward range id), so they are never constant-folded and two of them never look alike
// to common-subexpression elimination.
//
// Texts: message, domain and the backward names are attributes, resolved once when a kernel
// is built. Built eagerly (nvtx_plugins_tf/ops/_raw.py), an op takes them instead as its
// `text` input of string scalars (num_text > 0, in the order documented per op), so that
// TensorFlow's eager kernel cache, which keeps a kernel per distinct set of attributes,
// holds one kernel whatever the names. `emit = false` (a range around code TensorFlow
// prunes, nvtx_plugins_tf/ops/_dead_ranges.py): the op forwards its tensors, emits nothing.
// Graphs saved before these existed load unchanged (their defaults: no text input, emit).
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

// Outputs [0, n) mirror inputs [0, n), with the shape and dtype a resource or variant
// tensor carries as handle data (as TensorFlow's UnchangedShape does for Identity); one
// more scalar output when `with_id`.
absl::Status PassThroughShapes(InferenceContext* c, int n, bool with_id) {
  for (int i = 0; i < n; ++i) {
    c->set_output(i, c->input(i));
    const auto* handle_data = c->input_handle_shapes_and_types(i);
    if (handle_data != nullptr) c->set_output_handle_shapes_and_types(i, *handle_data);
  }
  if (with_id) c->set_output(n, c->Scalar());
  return absl::OkStatus();
}

int NumPassThrough(InferenceContext* c) {
  std::vector<::tensorflow::DataType> t, host;
  if (!c->GetAttr("T", &t).ok() || !c->GetAttr("Thost", &host).ok()) return 0;
  return static_cast<int>(t.size() + host.size());
}

using ::tensorflow::register_op::OpDefBuilderWrapper;

// The interface shared by NvtxStart and NvtxBackwardStart.
OpDefBuilderWrapper& StartInterface(OpDefBuilderWrapper& op) {
  return op.Input("inputs: T")
      .Input("host_inputs: Thost")
      .Input("payload: num_payload * int64")
      .Input("text: num_text * string")
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
      .Attr("pair: string = ''")
      .Attr("num_text: int >= 0 = 0")
      .Attr("emit: bool = true")
      .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), true); });
}

// The interface shared by NvtxEnd and NvtxBackwardEnd.
OpDefBuilderWrapper& EndInterface(OpDefBuilderWrapper& op) {
  return op.Input("inputs: T")
      .Input("host_inputs: Thost")
      .Input("range_id: num_ids * int64")
      .Input("text: num_text * string")
      .Output("outputs: T")
      .Output("host_outputs: Thost")
      .Attr("T: list(type) >= 0")
      .Attr("Thost: list(type) >= 0")
      .Attr("num_ids: int >= 0 = 1")
      .Attr("domain_name: string = ''")
      .Attr("close_at_step_end: bool = false")
      .Attr("pair: string = ''")
      .Attr("num_text: int >= 0 = 0")
      .Attr("emit: bool = true")
      .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), false); });
}

// Registers op `name` built by `define` at library load, as REGISTER_OP does.
template <typename Define>
::tensorflow::InitOnStartupMarker Register(const char* name, Define define) {
  OpDefBuilderWrapper op(name);
  define(op);
  return op();
}

const auto kNvtxStart = Register("NvtxStart", [](OpDefBuilderWrapper& op) {
  StartInterface(op).SetIsStateful().Doc(R"doc(
Opens an NVTX start/end range named `message` in `domain_name` when it executes and
passes its tensors through unchanged. `range_id` identifies the range for NvtxEnd.
color: ARGB color, 0 for none. category: NVTX category, 0 for none.
payload: at most one int64 scalar attached to the range as its payload.
close_at_step_end: end the range when the session step ends unless NvtxEnd did.
pair: "TOKEN@NODE" when NvtxEnd finds the id through the pair instead of `range_id`
(cc_ops/tf_ops/range_pairing.h); `range_id` is then produced only if something uses it.
text: with num_text = 2, [message, domain_name], used instead of the attributes.
emit: false for a range around code TensorFlow prunes: forward the tensors, emit nothing.
)doc");
});

const auto kNvtxEnd = Register("NvtxEnd", [](OpDefBuilderWrapper& op) {
  EndInterface(op).Attr("grad_message: string = ''").Attr("grad_domain_name: string = ''").SetIsStateful().Doc(R"doc(
Ends the NVTX range `range_id` (opened by NvtxStart) when it executes and passes its
tensors through unchanged. With no `range_id` (num_ids = 0) the range is the one its
NvtxStart with the same `pair` opened in this execution, if that start ran. An unknown or forged id is handed to NVTX as is: it never
crashes the process. grad_message/grad_domain_name: read by the registered gradient,
which opens the backward range (empty: no backward range).
text: with num_text = 3, [domain_name, grad_message, grad_domain_name], used instead of the
attributes. emit: as for NvtxStart.
)doc");
});

const auto kNvtxBackwardStart = Register("NvtxBackwardStart", [](OpDefBuilderWrapper& op) {
  StartInterface(op).Doc(R"doc(
The backward range of a forward NvtxStart/NvtxEnd pair. It opens an NVTX start/end range
like NvtxStart, but it is not stateful, so it runs only when the gradients it passes
through are used.
payload: the forward range's id, which links the backward range to its forward one.
text: with num_text = 2, [message, domain_name].
)doc");
});

const auto kNvtxBackwardEnd = Register("NvtxBackwardEnd", [](OpDefBuilderWrapper& op) {
  EndInterface(op).Doc(R"doc(
Ends the backward range `range_id` (opened by NvtxBackwardStart) like NvtxEnd. It is not
stateful, so it runs only when the gradients it passes through are used.
text: with num_text = 1, [domain_name].
)doc");
});

}  // namespace

REGISTER_OP("NvtxMark")
    .Input("inputs: T")
    .Input("host_inputs: Thost")
    .Input("payload: num_payload * int64")
    .Input("text: num_text * string")
    .Output("outputs: T")
    .Output("host_outputs: Thost")
    .Attr("T: list(type) >= 0")
    .Attr("Thost: list(type) >= 0")
    .Attr("num_payload: int >= 0 = 0")
    .Attr("message: string")
    .Attr("domain_name: string = ''")
    .Attr("color: int = 0")
    .Attr("category: int = 0")
    .Attr("num_text: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return PassThroughShapes(c, NumPassThrough(c), false); })
    .Doc(R"doc(
Emits an NVTX mark (an instant) named `message` when it executes and passes its tensors
through unchanged. text: with num_text = 2, [message, domain_name].
)doc");

}  // namespace nvtx_tf
