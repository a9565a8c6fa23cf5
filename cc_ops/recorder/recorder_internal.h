// Internal declarations shared by the recorder's translation units (not installed,
// not part of the on-disk contract; see cc_ops/format/record_format.h for that).
//
// Layout of the recorder:
//   ../format/record_format.h  the on-disk format (shared with cc_ops/reader)
//   segment_writer.{h,cc}  segment files, chunk claiming and prefaulting, the per-thread
//                          state and the inline hot path (Reserve/Commit), drop counting
//   thread_lifetime.{h,cc} thread states' creation and exit, fork handling, the recorder
//                          mutex, pinning the library
//   clock.{h,cc}           the timestamps: CLOCK_MONOTONIC ns from the TSC (calibrated,
//                          re-anchored) or from clock_gettime
//   config.{h,cc}          output directory and chunk size (environment, control API),
//                          starting a new segment
//   os_util.{h,cc}         OS helpers: gettid, mkdir -p, /proc reads, file size limit, fds
//   string_table.{h,cc}    UTF-8 helpers, kStringDef records, per-thread interning cache
//   registry.{h,cc}        domains, registered strings, category and thread names
//   callbacks.{h,cc}       the NVTX entry points, turning calls into records
//   payload_ext.{h,cc}     the NVTX payload extension: schema and enum registration
//                          (kPayloadSchema records), extended payload blocks of events
//   injection.cc           InitializeInjectionNvtx2 (fills the NVTX callback tables)
//   gate.{h,cc}            what is written: capture range windows, the domain filter
//   control.cc             the exported nvtx_recorder_* control API
//   recorder_internal.h    this map and the macros the files above share
#ifndef NVTX_PLUGINS_TF_RECORDER_INTERNAL_H_
#define NVTX_PLUGINS_TF_RECORDER_INTERNAL_H_

#define NVTXREC_LIKELY(x) __builtin_expect(!!(x), 1)
#define NVTXREC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NVTXREC_INLINE inline __attribute__((always_inline))
#define NVTXREC_EXPORT extern "C" __attribute__((visibility("default")))

#endif  // NVTX_PLUGINS_TF_RECORDER_INTERNAL_H_
