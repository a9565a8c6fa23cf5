/* NVTX v3 client for tests/test_defects_recorder.py (issue 9, recorder items).
 *
 *   defects_sample crossthread N   thread B records first (its chunk comes first in the
 *                                  file), main records N push/pops, then registers a
 *                                  string and creates a domain; B then uses both
 *   defects_sample threads N       N short-lived threads, one after the other, one mark each
 *   defects_sample fill N          N push/pop pairs with a 100-byte message; prints done=1
 *   defects_sample registry N      N distinct registered strings ("step <i>"), one push/pop
 *                                  each; then a forked child pushes the first and the last
 *                                  handle; prints rss_growth_kib and child_status
 *
 * Lines printed as key=value are checked by the test.
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static nvtxEventAttributes_t registered(nvtxStringHandle_t s) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = s;
  return a;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage = 0;
static nvtxDomainHandle_t late_domain;
static nvtxStringHandle_t late_string;

static void wait_stage(int s) {
  pthread_mutex_lock(&mu);
  while (stage < s) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

static void set_stage(int s) {
  pthread_mutex_lock(&mu);
  stage = s;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void* user_thread(void* arg) {
  (void)arg;
  nvtxMarkA("b-first"); /* claims the first chunk of the segment */
  set_stage(1);
  wait_stage(2);
  nvtxEventAttributes_t a = registered(late_string);
  nvtxDomainRangePushEx(late_domain, &a);
  nvtxDomainRangePop(late_domain);
  return NULL;
}

static int run_crossthread(int n) {
  pthread_t t;
  pthread_create(&t, NULL, user_thread, NULL);
  wait_stage(1);
  for (int i = 0; i < n; ++i) {
    nvtxRangePushA("main-loop");
    nvtxRangePop();
  }
  late_domain = nvtxDomainCreateA("late-domain");
  late_string = nvtxDomainRegisterStringA(late_domain, "late-message");
  set_stage(2);
  pthread_join(t, NULL);
  printf("done=1\n");
  return 0;
}

static void* one_mark(void* arg) {
  (void)arg;
  nvtxMarkA("one");
  return NULL;
}

static int run_threads(int n) {
  for (int i = 0; i < n; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, one_mark, NULL) != 0) return 1;
    pthread_join(t, NULL);
  }
  printf("done=1\n");
  return 0;
}

static int run_fill(int n) {
  char msg[101];
  memset(msg, 'f', 100);
  msg[100] = 0;
  for (int i = 0; i < n; ++i) {
    nvtxRangePushA(msg);
    nvtxRangePop();
  }
  printf("done=1\n");
  return 0;
}

static long rss_kib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static int run_registry(int n) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("hook");
  nvtxStringHandle_t first = 0, last = 0;
  char buf[64];
  /* Warm up (first chunk, thread state) before measuring. */
  nvtxMarkA("warm");
  long before = rss_kib();
  for (int i = 0; i < n; ++i) {
    snprintf(buf, sizeof(buf), "step %d", i);
    nvtxStringHandle_t s = nvtxDomainRegisterStringA(d, buf);
    if (i == 0) first = s;
    last = s;
    nvtxEventAttributes_t a = registered(s);
    nvtxDomainRangePushEx(d, &a);
    nvtxDomainRangePop(d);
  }
  long after = rss_kib();
  printf("rss_growth_kib=%ld\n", after - before);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    nvtxEventAttributes_t a = registered(first);
    nvtxDomainRangePushEx(d, &a);
    nvtxDomainRangePop(d);
    a = registered(last);
    nvtxDomainRangePushEx(d, &a);
    nvtxDomainRangePop(d);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  printf("child_status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  int n = atoi(argv[2]);
  if (strcmp(argv[1], "crossthread") == 0) return run_crossthread(n);
  if (strcmp(argv[1], "threads") == 0) return run_threads(n);
  if (strcmp(argv[1], "fill") == 0) return run_fill(n);
  if (strcmp(argv[1], "registry") == 0) return run_registry(n);
  return 2;
}
