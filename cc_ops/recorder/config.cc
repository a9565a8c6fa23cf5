#include "recorder/config.h"

#include <errno.h>
#include <stdlib.h>

#include "recorder/os_util.h"
#include "recorder/segment_writer.h"
#include "recorder/thread_lifetime.h"

namespace nvtx_recorder {

namespace {

// Guarded by RecorderMutex().
char* g_dir = nullptr;  // leaked on change: OutputDir() pointers stay valid
bool g_chunk_size_set = false;

// NVTX_TF_CHUNK_SIZE, read once (the chunk size is fixed once configured): at least
// 8 KiB, at most 1 GiB, rounded up to whole pages.
void InitChunkSizeLocked() {
  if (g_chunk_size_set) return;
  g_chunk_size_set = true;
  const char* env = getenv("NVTX_TF_CHUNK_SIZE");
  if (!env || !*env) return;
  char* end = nullptr;
  unsigned long long v = strtoull(env, &end, 0);
  if (end == env) return;
  if (v < 8192) v = 8192;
  if (v > (1ull << 30)) v = 1ull << 30;
  v = (v + 4095) & ~4095ull;
  g_chunk_size = static_cast<uint32_t>(v);
}

}  // namespace

bool ConfigureFromEnvironment() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  InitChunkSizeLocked();
  if (g_dir) return true;
  const char* env = getenv("NVTX_TF_RECORD_DIR");
  if (!env || !*env) return false;
  g_dir = ResolveDirectory(env);
  if (!g_dir) return false;
  EnsureRuntime();
  return true;
}

int SetOutputDir(const char* dir) {
  if (!dir || !*dir) {
    errno = EINVAL;
    return -1;
  }
  char* copy = ResolveDirectory(dir);
  if (!copy) return -1;
  EnsureRuntime();
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  InitChunkSizeLocked();
  g_dir = copy;  // the previous string is leaked on purpose (callers may hold it)
  StartNewEpochLocked();
  return 0;
}

const char* OutputDir() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  // Asked before NVTX initialized the library (ctypes loaded it first: testing.capture() as
  // a program's first NVTX use, under `record`): the folder NVTX_TF_RECORD_DIR names is the
  // one the initialization will take, so it is taken now. Before, the caller saw none,
  // pointed the recorder at a scratch folder, and the outer recording stayed empty.
  if (!g_dir) ConfigureFromEnvironment();
  return g_dir ? g_dir : "";
}

const char* OutputDirLocked() { return g_dir; }

uint64_t NewSegment() {
  EnsureRuntime();
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (!g_dir) return 0;
  HoldWindowDropsLocked();
  StartNewEpochLocked();
  return NowNs();
}

}  // namespace nvtx_recorder
