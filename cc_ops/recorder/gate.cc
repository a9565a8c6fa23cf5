#include "recorder/gate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <string>
#include <vector>

#include "recorder/registry.h"
#include "recorder/segment_writer.h"

namespace nvtx_recorder {

std::atomic<uint32_t> g_gate{0};

namespace {

enum DomainMode { kDomainDefault = 0, kDomainAny = 1, kDomainNamed = 2 };
enum EndMode { kEndStop = 0, kEndRepeat = 1, kEndNone = 2 };
enum WindowKind { kWindowPush = 1, kWindowStart = 2 };
constexpr int kMaxMatchingStrings = 64;

struct CaptureConfig {
  std::string name;
  int domain_mode = kDomainDefault;
  std::string domain;
  std::atomic<uint32_t> domain_id{0};  // kDomainNamed: the domain's id once created
  int end_mode = kEndStop;
  uint64_t max_windows = 1;                                 // 0: no limit
  std::atomic<uint32_t> strings[kMaxMatchingStrings] = {};  // registered strings equal to name
  std::atomic<int> n_strings{0};
};

// Published once complete; replaced configurations are leaked (a callback may hold one).
std::atomic<CaptureConfig*> g_capture{nullptr};
std::atomic<uint64_t> g_windows{0};
// The window: (generation << 1) | open. The generation grows at every opening, so an
// event that read "open" twice knows it was the same window (DecideWritten).
std::atomic<uint64_t> g_window{0};
// The range that opened the current window (written under the recorder mutex; read
// without it only as a first filter, then checked again under it).
std::atomic<int> g_win_kind{0};
std::atomic<uint64_t> g_win_thread{0};  // WindowOpener::thread
std::atomic<uint32_t> g_win_domain{0};
std::atomic<int32_t> g_win_depth{0};
std::atomic<uint64_t> g_win_range_id{0};

// Domain filter (set once, from the environment, before any callback is installed).
bool g_filter_include = false;
std::vector<std::string>* g_filter_names = nullptr;
std::atomic<bool> g_default_excluded{false};

// nsys's list syntax: comma-separated, '\' escapes the next character; an unescaped item
// "default" is the default domain (returned as `*has_default`), "\default" a domain of
// that name.
std::vector<std::string> ParseDomainList(const char* s, bool* has_default) {
  std::vector<std::string> out;
  *has_default = false;
  std::string item;
  bool escaped_item = false;
  auto flush = [&]() {
    if (item == "default" && !escaped_item)
      *has_default = true;
    else if (!item.empty())
      out.push_back(item);
    item.clear();
    escaped_item = false;
  };
  for (; *s; ++s) {
    if (*s == '\\' && s[1]) {
      escaped_item = true;
      item.push_back(*++s);
    } else if (*s == ',') {
      flush();
    } else {
      item.push_back(*s);
    }
  }
  flush();
  return out;
}

bool ParseEnd(const char* end, int* mode, uint64_t* max_windows) {
  if (!end || !*end || strcmp(end, "stop") == 0) {
    *mode = kEndStop;
    *max_windows = 1;
    return true;
  }
  if (strcmp(end, "none") == 0) {
    *mode = kEndNone;
    *max_windows = 1;
    return true;
  }
  if (strncmp(end, "repeat", 6) == 0) {
    *mode = kEndRepeat;
    *max_windows = 0;
    if (end[6] == 0) return true;
    if (end[6] != ':' || end[7] < '1' || end[7] > '9') return false;
    char* stop = nullptr;
    unsigned long long n = strtoull(end + 7, &stop, 10);
    if (*stop) return false;
    *max_windows = n;
    return true;
  }
  return false;
}

bool Armed(const CaptureConfig* c) {
  uint64_t opened = g_windows.load(std::memory_order_relaxed);
  return c->max_windows == 0 || opened < c->max_windows;
}

bool MatchesDomain(const CaptureConfig* c, uint16_t domain) {
  switch (c->domain_mode) {
    case kDomainAny:
      return true;
    case kDomainNamed: {
      uint32_t id = c->domain_id.load(std::memory_order_acquire);
      return id != 0 && id == domain;
    }
    default:
      return domain == 0;
  }
}

bool MatchesMessage(const CaptureConfig* c, int msg_kind, const void* msg) {
  if (msg_kind == 1) return strcmp(static_cast<const char*>(msg), c->name.c_str()) == 0;  // ASCII
  if (msg_kind == 3) {                                                                    // registered
    uint32_t id = uint32_t(reinterpret_cast<uintptr_t>(msg));
    int n = c->n_strings.load(std::memory_order_acquire);
    for (int i = 0; i < n && i < kMaxMatchingStrings; ++i) {
      if (c->strings[i].load(std::memory_order_relaxed) == id) return true;
    }
  }
  return false;  // no message, or UTF-32 (not matched)
}

void AddString(CaptureConfig* c, uint32_t id) {
  int n = c->n_strings.load(std::memory_order_relaxed);
  if (n >= kMaxMatchingStrings) return;
  c->strings[n].store(id, std::memory_order_relaxed);
  c->n_strings.store(n + 1, std::memory_order_release);
}

}  // namespace

int SetCaptureRange(const char* spec, const char* end) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (!spec || !*spec) {
    g_capture.store(nullptr, std::memory_order_release);
    g_gate.fetch_and(~kGateCapture, std::memory_order_relaxed);
    g_win_kind.store(0, std::memory_order_relaxed);
    g_window.store((g_window.load(std::memory_order_relaxed) | 1) + 1, std::memory_order_release);  // closed
    return 0;
  }
  CaptureConfig* c = new (std::nothrow) CaptureConfig();
  if (!c) {
    errno = ENOMEM;
    return -1;
  }
  if (!ParseEnd(end, &c->end_mode, &c->max_windows)) {
    delete c;
    errno = EINVAL;
    return -1;
  }
  std::string s(spec);
  size_t at = s.rfind('@');
  c->name = s.substr(0, at);
  if (at != std::string::npos) {
    c->domain = s.substr(at + 1);
    c->domain_mode = c->domain == "*" ? kDomainAny : kDomainNamed;
  }
  if (c->name.empty() || (at != std::string::npos && c->domain.empty())) {
    delete c;
    errno = EINVAL;
    return -1;
  }
  if (c->domain_mode == kDomainNamed) c->domain_id.store(FindDomain(c->domain.data(), c->domain.size()));
  ForEachRegisteredString([c](uint16_t domain, uint32_t id, const std::string& text) {
    if (text == c->name && MatchesDomain(c, domain)) AddString(c, id);
  });
  g_window.store((g_window.load(std::memory_order_relaxed) | 1) + 1, std::memory_order_release);  // closed
  g_windows.store(0, std::memory_order_relaxed);
  g_win_kind.store(0, std::memory_order_relaxed);
  g_capture.store(c, std::memory_order_release);
  g_gate.fetch_or(kGateCapture, std::memory_order_release);
  return 0;
}

uint64_t CaptureWindowsOpened() { return g_windows.load(std::memory_order_relaxed); }
bool CaptureWindowOpen() {
  return g_capture.load(std::memory_order_acquire) != nullptr && (g_window.load(std::memory_order_acquire) & 1);
}

void ConfigureGateFromEnvironment() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  static bool done = false;
  if (done) return;
  done = true;
  const char* include = getenv("NVTX_TF_DOMAIN_INCLUDE");
  const char* exclude = getenv("NVTX_TF_DOMAIN_EXCLUDE");
  const char* list = include && *include ? include : exclude && *exclude ? exclude : nullptr;
  if (list) {
    bool has_default = false;
    g_filter_include = list == include;
    g_filter_names = new std::vector<std::string>(ParseDomainList(list, &has_default));
    g_default_excluded.store(g_filter_include ? !has_default : has_default, std::memory_order_relaxed);
    g_gate.fetch_or(kGateDomains, std::memory_order_release);
  }
  const char* range = getenv("NVTX_TF_CAPTURE_RANGE");
  if (range && *range) SetCaptureRange(range, getenv("NVTX_TF_CAPTURE_RANGE_END"));
}

bool DomainNameExcluded(const char* name, size_t len) {
  if (!g_filter_names) return false;
  bool listed = false;
  for (const std::string& n : *g_filter_names) {
    if (n.size() == len && memcmp(n.data(), name, len) == 0) {
      listed = true;
      break;
    }
  }
  return g_filter_include ? !listed : listed;
}

bool DefaultDomainExcluded() { return g_default_excluded.load(std::memory_order_relaxed); }

void GateNoteDomain(uint16_t id, const char* name, size_t len) {
  CaptureConfig* c = g_capture.load(std::memory_order_acquire);
  if (c && c->domain_mode == kDomainNamed && c->domain.size() == len && memcmp(c->domain.data(), name, len) == 0) {
    c->domain_id.store(id, std::memory_order_release);
  }
}

void GateNoteRegisteredString(uint16_t domain, uint32_t id, const char* text, size_t len) {
  CaptureConfig* c = g_capture.load(std::memory_order_acquire);
  if (c && c->name.size() == len && memcmp(c->name.data(), text, len) == 0 && MatchesDomain(c, domain)) {
    AddString(c, id);
  }
}

namespace {

// Under the recorder mutex: opens a window for `o` if it names one and windows remain.
bool OpenWindowLocked(const CaptureConfig* c, ThreadState* ts, uint64_t* now, const WindowOpener& o) {
  if (!Armed(c)) return false;
  // Stamped before the window is published: no event inside precedes its opener.
  *now = NowNsOrdered(ts);
  g_windows.fetch_add(1, std::memory_order_relaxed);
  g_win_kind.store(o.range_id ? kWindowStart : kWindowPush, std::memory_order_relaxed);
  g_win_thread.store(o.thread, std::memory_order_relaxed);
  g_win_domain.store(o.domain, std::memory_order_relaxed);
  g_win_depth.store(o.depth, std::memory_order_relaxed);
  g_win_range_id.store(o.range_id, std::memory_order_relaxed);
  g_window.store((g_window.load(std::memory_order_relaxed) | 1) + 2, std::memory_order_release);
  return true;
}

// Under the recorder mutex: closes the window (unless the end mode keeps it open). The
// exchange is a locked instruction: the close is visible to every thread before the
// caller reads the clock for the closing range's end.
void CloseWindowLocked(const CaptureConfig* c) {
  if (c->end_mode == kEndNone) return;
  g_win_kind.store(0, std::memory_order_relaxed);
  g_window.exchange(g_window.load(std::memory_order_relaxed) & ~uint64_t(1), std::memory_order_seq_cst);
}

// Keeps the clock read that follows the first load of g_window and precedes the second
// one in that order (rdtscp waits for earlier loads; the lfence holds back later ones).
inline void LoadFence() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_lfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace

bool DecideWritten(ThreadState* ts, uint64_t* now, const WindowOpener* opener) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const CaptureConfig* c = g_capture.load(std::memory_order_acquire);
    if (!c) {  // cleared meanwhile: everything is written again
      *now = NowNsOrdered(ts);
      return true;
    }
    const uint64_t before = g_window.load(std::memory_order_acquire);
    if (before & 1) {
      *now = NowNsOrdered(ts);
      LoadFence();
      if (g_window.load(std::memory_order_acquire) == before) return true;
      continue;  // the window closed (or another opened) while stamping: decide again
    }
    if (!opener || !Armed(c) || !MatchesDomain(c, opener->domain) ||
        !MatchesMessage(c, opener->msg_kind, opener->msg)) {
      return false;
    }
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    if (g_capture.load(std::memory_order_relaxed) != c) continue;
    if (g_window.load(std::memory_order_relaxed) & 1) continue;  // another thread opened one
    return OpenWindowLocked(c, ts, now, *opener);
  }
  return false;  // the window kept changing under this event: counted as outside
}

void ClosePushWindowIfOpener(uint64_t thread, uint16_t domain, int32_t depth) {
  auto matches = [&] {
    return g_win_kind.load(std::memory_order_relaxed) == kWindowPush &&
           g_win_thread.load(std::memory_order_relaxed) == thread &&
           g_win_domain.load(std::memory_order_relaxed) == domain &&
           g_win_depth.load(std::memory_order_relaxed) == depth;
  };
  if (!matches()) return;
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  const CaptureConfig* c = g_capture.load(std::memory_order_relaxed);
  if (c && matches()) CloseWindowLocked(c);
}

void CloseStartWindowIfOpener(uint64_t range_id) {
  auto matches = [&] {
    return g_win_kind.load(std::memory_order_relaxed) == kWindowStart &&
           g_win_range_id.load(std::memory_order_relaxed) == range_id;
  };
  if (!matches()) return;
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  const CaptureConfig* c = g_capture.load(std::memory_order_relaxed);
  if (c && matches()) CloseWindowLocked(c);
}

}  // namespace nvtx_recorder
