// The NVTX payload extension: schema and enum registration (kPayloadSchema records) and
// the payload block of events whose attributes carry NVTX_PAYLOAD_TYPE_EXT
// (format/record_format.h). Only events with extended payloads pay for any of it.
#ifndef NVTX_PLUGINS_TF_RECORDER_PAYLOAD_EXT_H_
#define NVTX_PLUGINS_TF_RECORDER_PAYLOAD_EXT_H_

#include <stddef.h>
#include <stdint.h>

#include "recorder/callbacks.h"
#include "recorder/segment_writer.h"

namespace nvtx_recorder {

// nvtxEventAttributes_t::payloadType of extended payloads (NVTX_PAYLOAD_TYPE_EXT).
constexpr int32_t kNvtxPayloadTypeExt = static_cast<int32_t>(0xDFBD0009);

// Builds the payload block of one event from the caller's nvtxPayloadData_t array
// (`count` entries, as evtAttr.reserved0 says) into a buffer of the calling thread;
// returns its length (a multiple of 8, at most the record space a chunk allows) and
// points *out at it. Reads only the bytes each nvtxPayloadData_t declares (capped) and,
// for pointer C-string fields of a registered schema, the string (through
// process_vm_readv: a bad pointer is never dereferenced).
uint32_t BuildPayloadBlock(uint16_t domain, const void* data, int32_t count, const uint8_t** out);

// The payload extension's entry points (InitializeInjectionNvtxExtension installs them).
uint64_t NVTX_API PayloadSchemaRegister(nvtxDomainHandle_t domain, const void* attr);
uint64_t NVTX_API PayloadEnumRegister(nvtxDomainHandle_t domain, const void* attr);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_PAYLOAD_EXT_H_
