// A process-wide, thread-safe cache of NVTX domain handles, and the event attributes a
// kernel resolves once when it is constructed.
#ifndef NVTX_PLUGINS_TF_NVTX_HANDLES_H_
#define NVTX_PLUGINS_TF_NVTX_HANDLES_H_

#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace nvtx_tf {

// The handle of the domain called `name`; nullptr (NVTX's default domain) for "".
// Created once per process and name, whichever thread or kernel asks first.
nvtxDomainHandle_t DomainFor(const std::string& name);

// What one start or mark kernel emits: fixed at graph build, resolved once. The domain
// and the attributes (what the kernels read on every execution) come first.
struct EventSpec {
  nvtxDomainHandle_t domain = nullptr;
  nvtxEventAttributes_t attributes{};
  std::string message;  // owns the text that attributes.message points to
};

// Validates color (0 or a 32-bit ARGB value) and category (0..2^32-1) and resolves the
// domain. InvalidArgument names the offending attribute.
absl::Status MakeEventSpec(const std::string& message, const std::string& domain_name, int64_t color, int64_t category,
                           EventSpec* spec);

}  // namespace nvtx_tf

#endif  // NVTX_PLUGINS_TF_NVTX_HANDLES_H_
