#include "recorder/thread_lifetime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <new>

#include "recorder/clock.h"
#include "recorder/gate.h"
#include "recorder/os_util.h"
#include "recorder/segment_writer.h"
#include "recorder/string_table.h"

namespace nvtx_recorder {

__thread ThreadState* t_state = nullptr;

namespace {

__thread bool t_dead = false;      // set once this thread's state was torn down
__thread bool t_creating = false;  // inside CreateThreadState (a signal handler's event drops)

// Guarded by RecorderMutex().
ThreadState* g_threads = nullptr;  // live thread states
uint64_t g_retired_events = 0;     // events of exited threads
uint64_t g_thread_serial = 0;
bool g_runtime_ready = false;
pthread_key_t g_exit_key;

void ThreadExit(void* p) {
  ErrnoGuard keep_errno;
  ThreadState* ts = static_cast<ThreadState*>(p);
  t_state = nullptr;
  t_dead = true;
  {
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    if (ts->prev)
      ts->prev->next = ts->next;
    else if (g_threads == ts)
      g_threads = ts->next;
    if (ts->next) ts->next->prev = ts->prev;
    g_retired_events += ts->events.load(std::memory_order_relaxed);
  }
  SealAndUnmapChunk(ts);
  ReleaseStringMemory(ts);
  ReleaseFates(ts);
  UnmapMemory(ts, sizeof(ThreadState));
}

// The clock's writer flag after the recorder mutex (a clock anchor never takes the mutex,
// a thread holding the mutex may anchor). The child anchors anew on its own clock.
void AtForkPrepare() {
  RecorderMutex().lock();
  ClockAtForkPrepare();
}
void AtForkParent() {
  ClockAtForkParent();
  RecorderMutex().unlock();
}
void AtForkChild() {
  ClockAtForkChild();
  // Only the forking thread exists here. Other threads' chunks still map the parent's
  // file: drop them (never written again); leak their states (tiny, owner gone).
  // The forking thread's chunk too: the parent goes on writing into it, so the child
  // must neither write nor seal it (SwitchLocked would).
  ThreadState* self = t_state;
  for (ThreadState* ts = g_threads; ts;) {
    ThreadState* next = ts->next;
    if (ts->chunk) {
      UnmapChunk(ts);
      ts->pos = ts->limit = ts->chunk_end = 0;
    }
    ts = next;
  }
  g_threads = nullptr;
  if (self) {
    self->next = self->prev = nullptr;
    g_threads = self;
    self->events.store(0, std::memory_order_relaxed);
    self->clock = ClockLine{};  // its copy of the parent's line: the child's own from the next read
  }
  g_retired_events = 0;
  SegmentWriterAfterForkInChild();
  // The mutex taken in AtForkPrepare is owned by the parent's thread id: unlocking it
  // here fails (recursive mutexes check the owner), so start from a fresh one.
  new (&RecorderMutex()) std::recursive_mutex();
}

}  // namespace

std::recursive_mutex& RecorderMutex() {
  // Never destroyed (NVTX calls from static destructors stay safe); storage kept so the
  // forked child can re-create the mutex in place.
  alignas(std::recursive_mutex) static unsigned char storage[sizeof(std::recursive_mutex)];
  static std::recursive_mutex* mu = new (storage) std::recursive_mutex();
  return *mu;
}

void EnsureRuntime() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  if (g_runtime_ready) return;
  g_runtime_ready = true;
  InitClock();  // the source and its calibration (~0.2 ms) before the first event
  // Pin the library: the fork handlers and the thread-exit key point into it.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&EnsureRuntime), &info) && info.dli_fname) {
    dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
  pthread_key_create(&g_exit_key, ThreadExit);
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
}

// No malloc on the way (MapZeroed), and a signal handler's event that interrupts it finds
// t_creating set and is dropped. The state's memory is zeroed pages: nothing to
// initialize but what is set below (a default-initialized ThreadState has no constructor
// that runs: std::atomic's default constructor is trivial in C++17).
ThreadState* CreateThreadState() {
  if (t_dead || t_creating) return nullptr;
  ErrnoGuard keep_errno;
  t_creating = true;
  EnsureRuntime();
  void* mem = MapZeroed(sizeof(ThreadState));
  if (!mem) {
    t_creating = false;
    return nullptr;
  }
  ThreadState* ts = new (mem) ThreadState;
  ts->tid = GetTid();
  {
    std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
    uint64_t serial = g_thread_serial++;
    ts->serial = serial;
    ts->range_hi = (serial + 1) << kRangeCounterBits;
    ts->next = g_threads;
    if (g_threads) g_threads->prev = ts;
    g_threads = ts;
  }
  pthread_setspecific(g_exit_key, ts);
  t_state = ts;
  t_creating = false;
  return ts;
}

uint64_t EventCount() {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  uint64_t sum = g_retired_events;
  for (ThreadState* ts = g_threads; ts; ts = ts->next) sum += ts->events.load(std::memory_order_relaxed);
  return sum;
}

}  // namespace nvtx_recorder
