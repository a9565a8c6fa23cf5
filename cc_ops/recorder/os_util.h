// Small OS helpers of the recorder: thread ids, directories, /proc files, the file size
// limit, and owners of file descriptors and malloc'ed memory. No recorder state here.
#ifndef NVTX_PLUGINS_TF_RECORDER_OS_UTIL_H_
#define NVTX_PLUGINS_TF_RECORDER_OS_UTIL_H_

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

namespace nvtx_recorder {

int64_t GetTid();

// mkdir -p with mode 0700 (recordings hold command lines); checks the result is a
// writable directory. 0, or -1 with errno.
int MakeDirs(const char* path);

// mkdir -p, then the absolute path of the directory in a malloc'ed string (the path as
// given when realpath fails). Null with errno on failure.
char* ResolveDirectory(const char* path);

// Reads a small /proc file into buf (NUL-terminated); returns bytes read.
size_t ReadProcFile(const char* path, char* buf, size_t cap);
// The same without the trailing newlines (e.g. a comm file).
size_t ReadProcLine(const char* path, char* buf, size_t cap);

// RLIMIT_FSIZE: a write or truncate past it raises SIGXFSZ, whose default action kills
// the process. The recorder never goes past it: true when a file may extend to `end`.
bool FileLimitAllows(uint64_t end);

// Zeroed private anonymous memory of `n` bytes (pages materialize when first touched),
// null on failure; freed with UnmapMemory. The recorder's per-thread memory comes from
// here rather than malloc: an NVTX event may come from a signal handler that
// interrupted malloc on the same thread, and mmap is a plain system call.
void* MapZeroed(size_t n);
void UnmapMemory(void* p, size_t n);
// Grows (or creates, when p is null) such a mapping to `n` bytes, keeping its contents;
// null on failure (p is then left as it was).
void* RemapMemory(void* p, size_t old_n, size_t n);

// Keeps the caller's errno for its scope. The recorder runs inside the profiled program's
// NVTX calls (a signal handler's among them): its slow paths' system calls (mkdir's EEXIST
// when a segment opens, a parse's EINVAL at the first call, ...) must not change the errno
// the program sees. The hot paths make no system call and hold none.
class ErrnoGuard {
 public:
  ErrnoGuard() : saved_(errno) {}
  ~ErrnoGuard() { errno = saved_; }
  ErrnoGuard(const ErrnoGuard&) = delete;
  ErrnoGuard& operator=(const ErrnoGuard&) = delete;

 private:
  int saved_;
};

// Writes all n bytes at offset off (retrying short writes and EINTR); false on error.
bool PwriteAll(int fd, const void* buf, size_t n, uint64_t off);

// Owns a file descriptor: closed on destruction unless released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ~ScopedFd();
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd);

 private:
  int fd_;
};

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_OS_UTIL_H_
