#include "recorder/os_util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nvtx_recorder {

int64_t GetTid() { return static_cast<int64_t>(syscall(SYS_gettid)); }

void* MapZeroed(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void UnmapMemory(void* p, size_t n) {
  if (p) munmap(p, n);
}

void* RemapMemory(void* p, size_t old_n, size_t n) {
  if (!p) return MapZeroed(n);
  void* q = mremap(p, old_n, n, MREMAP_MAYMOVE);
  return q == MAP_FAILED ? nullptr : q;
}

int MakeDirs(const char* path) {
  size_t n = strlen(path);
  if (n == 0 || n >= PATH_MAX) {
    errno = n ? ENAMETOOLONG : ENOENT;
    return -1;
  }
  char buf[PATH_MAX];
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] == '/' || buf[i] == 0) {
      char c = buf[i];
      buf[i] = 0;
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
      buf[i] = c;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  if (access(path, W_OK | X_OK) != 0) return -1;
  return 0;
}

char* ResolveDirectory(const char* path) {
  if (MakeDirs(path) != 0) return nullptr;
  char resolved[PATH_MAX];
  char* copy = strdup(realpath(path, resolved) ? resolved : path);
  if (!copy) errno = ENOMEM;
  return copy;
}

size_t ReadProcFile(const char* path, char* buf, size_t cap) {
  ScopedFd fd(open(path, O_RDONLY | O_CLOEXEC));
  size_t got = 0;
  while (fd.get() >= 0 && got + 1 < cap) {
    ssize_t r = read(fd.get(), buf + got, cap - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  buf[got] = 0;
  return got;
}

size_t ReadProcLine(const char* path, char* buf, size_t cap) {
  size_t n = ReadProcFile(path, buf, cap);
  while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
  return n;
}

bool FileLimitAllows(uint64_t end) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return true;
  return end <= uint64_t(rl.rlim_cur);
}

bool PwriteAll(int fd, const void* buf, size_t n, uint64_t off) {
  const char* src = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(fd, src + done, n - done, off_t(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += size_t(w);
  }
  return true;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) close(fd_);
}

void ScopedFd::reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
}

}  // namespace nvtx_recorder
