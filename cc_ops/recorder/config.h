// Configuration and control of the recording: the output directory and the chunk size
// (from NVTX_TF_RECORD_DIR / NVTX_TF_CHUNK_SIZE, or set through the control API in
// control.cc), and starting a new segment.
#ifndef NVTX_PLUGINS_TF_RECORDER_CONFIG_H_
#define NVTX_PLUGINS_TF_RECORDER_CONFIG_H_

#include <stdint.h>

namespace nvtx_recorder {

// Reads NVTX_TF_RECORD_DIR / NVTX_TF_CHUNK_SIZE once; true if a usable directory is set.
bool ConfigureFromEnvironment();
// Makes `dir` the recording directory (creating it); -1 with errno on failure.
int SetOutputDir(const char* dir);
// The recording directory, "" when none; the pointer stays valid.
const char* OutputDir();
// The same or null; caller holds RecorderMutex().
const char* OutputDirLocked();
// Starts a new segment in the current output directory for every thread's next event
// (the current one stays as it is). Returns the CLOCK_MONOTONIC time of the switch:
// segments opened afterwards have a larger start_ns. 0 when there is no directory.
uint64_t NewSegment();

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_CONFIG_H_
