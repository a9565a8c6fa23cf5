// Backward ranges that must be closed when a Session step ends.
//
// In a compat.v1 graph, tf.gradients computes only the gradients between the variables
// and the loss, and a session runs only what its fetches need. When an annotated region
// passes no gradient on (the model's first layer) the gradient of its NvtxStart is never
// built or never run, so the backward range opened by NvtxBackwardStart would stay open.
// Such ranges are registered in the step's container; an end that does run removes its
// range, and whatever is left when the session step ends is ended then. (Under a
// tf.GradientTape the Python tape closer ends them instead: nvtx_plugins_tf/ops/_tape_closer.py.)
#ifndef NVTX_PLUGINS_TF_STEP_RANGES_H_
#define NVTX_PLUGINS_TF_STEP_RANGES_H_

#include <nvtx3/nvToolsExt.h>

#include <cstdint>

#include "tensorflow/core/framework/op_kernel.h"

namespace nvtx_tf {

// Remembers range `id` of `domain` in the current step's container.
absl::Status RegisterStepRange(tensorflow::OpKernelContext* ctx, nvtxDomainHandle_t domain, uint64_t id);

// Forgets range `id`; false when it was not registered (already ended at a step end).
bool ForgetStepRange(tensorflow::OpKernelContext* ctx, uint64_t id);

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_STEP_RANGES_H_
