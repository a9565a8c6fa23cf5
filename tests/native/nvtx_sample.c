/* NVTX v3 client used by tests/test_recorder_native.py to exercise the recorder.
 *
 *   nvtx_sample basic            every API the recorder supports, once (see below)
 *   nvtx_sample stress T N       T threads x N push/pop ranges ("stress-<t>")
 *   nvtx_sample kill N           push/pop forever with payload = i; prints "ready N" after
 *                                N completed ranges (the test then SIGKILLs it)
 *   nvtx_sample fork             events before fork, in the child, after the child exits
 *   nvtx_sample strings          an over-long message (must be truncated to fit a chunk,
 *                                UTF-8 kept valid) and 3000 distinct messages twice
 *                                (evictions from the per-thread string cache)
 *   nvtx_sample twolibs LIB      LIB is this file built with -DNVTX_SAMPLE_LIBRARY -shared:
 *                                a second NVTX instance in the process, using the same
 *                                domain name; prints the recorder's attach count
 *   nvtx_sample exit             NVTX calls from a thread's TLS destructors after the
 *                                recorder's own per-thread teardown (dropped, no crash)
 *
 * Lines printed as key=value are checked by the test.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>

#ifdef NVTX_SAMPLE_LIBRARY
/* Built as a shared library: its own (hidden) NVTX globals, its own injection call. */
void second_lib_run(void) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("shared-domain");
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = "from-lib";
  nvtxDomainRangePushEx(d, &a);
  nvtxDomainRangePop(d);
}
#else

static long tid_now(void) { return (long)syscall(SYS_gettid); }

static nvtxEventAttributes_t attrs(const char* msg) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = msg;
  return a;
}

static void* end_on_other_thread(void* arg) {
  nvtxRangeId_t id = *(nvtxRangeId_t*)arg;
  printf("tid_thread=%ld\n", tid_now());
  nvtxRangeEnd(id);
  nvtxMarkA("in-thread");
  return NULL;
}

static int run_basic(void) {
  printf("tid_main=%ld\n", tid_now());
  nvtxNameOsThreadA((uint32_t)tid_now(), "main-renamed");
  nvtxNameCategoryA(7, "cat-seven");
  nvtxMarkA("mark-a"); /* mark 1 */

  int p0 = nvtxRangePushA("push-outer"); /* push 1 */
  int p1 = nvtxRangePushA("push-inner"); /* push 2 */
  int q1 = nvtxRangePop();               /* pop 1 */
  int q0 = nvtxRangePop();               /* pop 2 */
  printf("push_levels=%d,%d\npop_levels=%d,%d\n", p0, p1, q1, q0);

  nvtxEventAttributes_t a = attrs("start-ex");
  a.colorType = NVTX_COLOR_ARGB;
  a.color = 0xFF00FF00u;
  a.category = 7;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = 42;
  nvtxRangeId_t r1 = nvtxRangeStartEx(&a); /* start 1 */
  nvtxRangeEnd(r1);                        /* end 1 */
  printf("range_start_ex=%llu\n", (unsigned long long)r1);

  a = attrs("p-i64");
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = -5;
  nvtxMarkEx(&a);
  a = attrs("p-dbl");
  a.payloadType = NVTX_PAYLOAD_TYPE_DOUBLE;
  a.payload.dValue = 2.5;
  nvtxMarkEx(&a);
  a = attrs("p-u32");
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT32;
  a.payload.uiValue = 7;
  nvtxMarkEx(&a);
  a = attrs("p-i32");
  a.payloadType = NVTX_PAYLOAD_TYPE_INT32;
  a.payload.iValue = -7;
  nvtxMarkEx(&a);
  a = attrs("p-flt");
  a.payloadType = NVTX_PAYLOAD_TYPE_FLOAT;
  a.payload.fValue = 1.5f;
  nvtxMarkEx(&a);
  /* marks 2-6 */

  nvtxDomainHandle_t d = nvtxDomainCreateA("my-domain");
  nvtxDomainHandle_t d_again = nvtxDomainCreateA("my-domain");
  printf("same_domain=%d\n", d == d_again);
  nvtxStringHandle_t reg = nvtxDomainRegisterStringA(d, "reg-msg");
  nvtxEventAttributes_t ra;
  memset(&ra, 0, sizeof(ra));
  ra.version = NVTX_VERSION;
  ra.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  ra.colorType = NVTX_COLOR_ARGB;
  ra.color = 0xFFFF0000u;
  ra.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  ra.message.registered = reg;
  int dp = nvtxDomainRangePushEx(d, &ra); /* push 3 (domain) */
  int dq = nvtxDomainRangePop(d);         /* pop 3 (domain) */
  printf("domain_levels=%d,%d\n", dp, dq);
  nvtxDomainNameCategoryA(d, 3, "dom-cat");
  a = attrs("dom-mark");
  a.category = 3;
  nvtxDomainMarkEx(d, &a);                           /* mark 7 (domain) */
  nvtxRangeId_t dr = nvtxDomainRangeStartEx(d, &ra); /* start 2 (domain) */
  nvtxDomainRangeEnd(d, dr);                         /* end 2 (domain) */

  nvtxRangePushW(L"wide-\u00fc\u20ac\U0001F600"); /* push 4 */
  nvtxRangePop();                                 /* pop 4 */
  nvtxMarkW(L"mark-w");                           /* mark 8 */
  nvtxRangeId_t rw = nvtxRangeStartW(L"start-w"); /* start 3 */
  nvtxRangeEnd(rw);                               /* end 3 */

  nvtxRangeId_t cross = nvtxRangeStartA("cross-thread"); /* start 4 */
  printf("range_cross=%llu\n", (unsigned long long)cross);
  fflush(stdout);
  pthread_t th;
  pthread_create(&th, NULL, end_on_other_thread, &cross); /* end 4, mark 9 (other thread) */
  pthread_join(th, NULL);

  /* Robustness: none of these may crash; all are recorded without the bad part. */
  nvtxMarkA(NULL);      /* mark 10, no message */
  nvtxRangePushA(NULL); /* push 5, no message */
  nvtxRangePop();       /* pop 5 */
  nvtxMarkEx(NULL);     /* mark 11, no attributes */
  a = attrs("bad-size");
  a.size = 3;
  nvtxMarkEx(&a); /* mark 12, no attributes */
  a = attrs("bad-types");
  a.colorType = 42;
  a.color = 0x12345678u;
  a.payloadType = 77;
  nvtxMarkEx(&a); /* mark 13, message only */
  a = attrs("ignored");
  a.messageType = 99;
  a.category = 5;
  nvtxMarkEx(&a);             /* mark 14, category only */
  int empty = nvtxRangePop(); /* pop 6 (empty stack) */
  printf("empty_pop=%d\n", empty);
  nvtxRangeEnd(0xdeadbeefULL); /* end 5 (forged id) */
  nvtxDomainDestroy(d);
  nvtxDomainDestroy(d_again);
  printf("done\n");
  return 0;
}

struct stress_arg {
  int index;
  long n;
};

static void* stress_thread(void* p) {
  struct stress_arg* arg = (struct stress_arg*)p;
  char msg[32];
  snprintf(msg, sizeof(msg), "stress-%d", arg->index);
  for (long i = 0; i < arg->n; ++i) {
    nvtxRangePushA(msg);
    nvtxRangePop();
  }
  return NULL;
}

static int run_stress(int threads, long n) {
  pthread_t th[256];
  struct stress_arg args[256];
  if (threads > 256) threads = 256;
  for (int t = 0; t < threads; ++t) {
    args[t].index = t;
    args[t].n = n;
    pthread_create(&th[t], NULL, stress_thread, &args[t]);
  }
  for (int t = 0; t < threads; ++t) pthread_join(th[t], NULL);
  printf("done\n");
  return 0;
}

static int run_kill(long n) {
  nvtxEventAttributes_t a = attrs("kill-range");
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  for (unsigned long long i = 0;; ++i) {
    a.payload.ullValue = i;
    nvtxRangePushEx(&a);
    nvtxRangePop();
    if (i + 1 == (unsigned long long)n) {
      printf("ready %ld\n", n);
      fflush(stdout);
    }
  }
  return 0;
}

static int run_fork(void) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("fork-domain");
  nvtxRangePushA("parent-before");
  printf("parent_pid=%ld\n", (long)getpid());
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    nvtxRangePushA("child-range");
    nvtxRangePop();
    nvtxEventAttributes_t a = attrs("child-domain-mark");
    nvtxDomainMarkEx(d, &a);
    printf("child_pid=%ld\n", (long)getpid());
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  nvtxRangePop();
  nvtxMarkA("parent-after");
  printf("child_status=%d\n", status);
  return 0;
}

static int run_strings(void) {
  size_t n = 100000; /* longer than a chunk: the test runs with NVTX_TF_CHUNK_SIZE=8192 */
  char* big = malloc(n * 2 + 1);
  for (size_t i = 0; i < n; ++i) { /* "é" = C3 A9: a cut in the middle would be invalid */
    big[2 * i] = (char)0xC3;
    big[2 * i + 1] = (char)0xA9;
  }
  big[n * 2] = 0;
  nvtxMarkA(big);
  big[1] = 'x'; /* same buffer, different content: must not reuse the cached id */
  big[0] = 'x';
  nvtxMarkA(big);
  free(big);
  char msg[32];
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 3000; ++i) {
      snprintf(msg, sizeof(msg), "msg-%d", i);
      nvtxMarkA(msg);
    }
  }
  printf("done\n");
  return 0;
}

static pthread_key_t late_key;

static void late_destructor(void* value) {
  (void)value;
  nvtxMarkA("late-mark"); /* after the recorder tore this thread down: dropped */
  nvtxRangePushA("late-push");
  nvtxRangePop();
  nvtxRangeEnd(nvtxRangeStartA("late-start"));
}

static void* exiting_thread(void* arg) {
  (void)arg;
  nvtxMarkA("thread-mark");
  pthread_setspecific(late_key, (void*)1);
  return NULL;
}

static int run_exit(void) {
  nvtxMarkA("main-mark"); /* attaches the recorder first: its TLS key is created before ours */
  pthread_key_create(&late_key, late_destructor);
  for (int i = 0; i < 4; ++i) {
    pthread_t th;
    pthread_create(&th, NULL, exiting_thread, NULL);
    pthread_join(th, NULL);
  }
  nvtxMarkA("main-end");
  printf("done\n");
  return 0;
}

static int run_twolibs(const char* lib_path) {
  nvtxDomainHandle_t d = nvtxDomainCreateA("shared-domain");
  nvtxEventAttributes_t a = attrs("from-main");
  nvtxDomainMarkEx(d, &a);
  void* lib = dlopen(lib_path, RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  void (*run)(void) = (void (*)(void))dlsym(lib, "second_lib_run");
  run();
  void* recorder = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOW | RTLD_NOLOAD);
  int (*attached)(void) = recorder ? (int (*)(void))dlsym(recorder, "nvtx_recorder_attached") : NULL;
  printf("attached=%d\n", attached ? attached() : -1);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "basic";
  if (strcmp(mode, "basic") == 0) return run_basic();
  if (strcmp(mode, "stress") == 0 && argc > 3) return run_stress(atoi(argv[2]), atol(argv[3]));
  if (strcmp(mode, "kill") == 0 && argc > 2) return run_kill(atol(argv[2]));
  if (strcmp(mode, "fork") == 0) return run_fork();
  if (strcmp(mode, "strings") == 0) return run_strings();
  if (strcmp(mode, "exit") == 0) return run_exit();
  if (strcmp(mode, "twolibs") == 0 && argc > 2) return run_twolibs(argv[2]);
  fprintf(stderr, "usage: %s basic | stress T N | kill N | fork | strings | exit | twolibs LIB\n", argv[0]);
  return 2;
}
#endif /* NVTX_SAMPLE_LIBRARY */
