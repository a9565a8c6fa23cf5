/* NVTX calls scripted from the command line, for the capture-range and domain-filter
 * tests (tests/test_capture_range.py), run under our recorder and under the real nsys.
 *
 * Each argument is one operation, run in order on the main thread; "w:OP" runs OP on a
 * second thread (the main thread waits for it to finish):
 *   push:MSG[@DOM]   nvtxRangePushA (default domain) / nvtxDomainRangePushEx
 *   rpush:MSG[@DOM]  the same with a registered string message (rstart, rmark likewise)
 *   pop[@DOM]        nvtxRangePop / nvtxDomainRangePop
 *   start:MSG[@DOM]  nvtxRangeStartA / nvtxDomainRangeStartEx (id kept on a stack)
 *   end              ends the most recently started range still open (any thread)
 *   mark:MSG[@DOM]   nvtxMarkA / nvtxDomainMarkEx
 *   cat:N:NAME[@DOM] nvtxNameCategoryA / nvtxDomainNameCategoryA
 *   loop:K:N         repeat the next N operations K times
 *   enabled:DOM      prints "DOM enabled=0|1" (whether NVTX hands out a domain handle)
 * Domains are created on first use (nvtxDomainCreateA). */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DOMAINS 32
static char* g_domain_names[MAX_DOMAINS];
static nvtxDomainHandle_t g_domains[MAX_DOMAINS];
static int g_ndomains;

static nvtxRangeId_t g_ids[256];
static nvtxDomainHandle_t g_id_domains[256];
static int g_nids;

static nvtxDomainHandle_t domain(const char* name) {
  if (!name) return NULL;
  for (int i = 0; i < g_ndomains; ++i)
    if (strcmp(g_domain_names[i], name) == 0) return g_domains[i];
  if (g_ndomains == MAX_DOMAINS) return NULL;
  g_domain_names[g_ndomains] = strdup(name);
  g_domains[g_ndomains] = nvtxDomainCreateA(name);
  return g_domains[g_ndomains++];
}

/* Splits "MSG@DOM" in place: returns DOM (or NULL). */
static char* split_domain(char* s) {
  char* at = strrchr(s, '@');
  if (!at) return NULL;
  *at = 0;
  return at + 1;
}

static nvtxEventAttributes_t attrs(nvtxDomainHandle_t d, const char* msg, int registered) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof(a));
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  if (registered) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(d, msg);
  } else {
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
  }
  return a;
}

static void run_op(const char* op_in) {
  char* op = strdup(op_in);
  char* arg = strchr(op, ':');
  if (arg) *arg++ = 0;
  if (strncmp(op, "pop", 3) == 0) {
    char* dom = op[3] == '@' ? op + 4 : NULL;
    if (dom)
      nvtxDomainRangePop(domain(dom));
    else
      nvtxRangePop();
  } else if (strcmp(op, "end") == 0) {
    if (g_nids > 0) {
      --g_nids;
      if (g_id_domains[g_nids])
        nvtxDomainRangeEnd(g_id_domains[g_nids], g_ids[g_nids]);
      else
        nvtxRangeEnd(g_ids[g_nids]);
    }
  } else if (strncmp(op, "enabled", 7) == 0 && arg) {
    printf("%s enabled=%d\n", arg, domain(arg) != NULL);
  } else if (arg && (strcmp(op, "push") == 0 || strcmp(op, "rpush") == 0 || strcmp(op, "start") == 0 ||
                     strcmp(op, "rstart") == 0 || strcmp(op, "mark") == 0 || strcmp(op, "rmark") == 0)) {
    char* dom = split_domain(arg);
    nvtxDomainHandle_t d = domain(dom);
    int registered = op[0] == 'r';
    if (registered) memmove(op, op + 1, strlen(op));
    if (!dom && !registered) {
      if (op[0] == 'p') nvtxRangePushA(arg);
      if (op[0] == 'm') nvtxMarkA(arg);
      if (op[0] == 's' && g_nids < 256) {
        g_id_domains[g_nids] = NULL;
        g_ids[g_nids++] = nvtxRangeStartA(arg);
      }
    } else {
      nvtxEventAttributes_t a = attrs(d, arg, registered);
      if (op[0] == 'p') nvtxDomainRangePushEx(d, &a);
      if (op[0] == 'm') nvtxDomainMarkEx(d, &a);
      if (op[0] == 's' && g_nids < 256) {
        g_id_domains[g_nids] = d;
        g_ids[g_nids++] = nvtxDomainRangeStartEx(d, &a);
      }
    }
  } else if (strcmp(op, "cat") == 0 && arg) {
    char* name = strchr(arg, ':');
    if (name) {
      *name++ = 0;
      char* dom = split_domain(name);
      if (dom)
        nvtxDomainNameCategoryA(domain(dom), (uint32_t)atoi(arg), name);
      else
        nvtxNameCategoryA((uint32_t)atoi(arg), name);
    }
  } else {
    fprintf(stderr, "capture_sample: unknown operation %s\n", op_in);
    exit(2);
  }
  free(op);
}

static void* worker(void* op) {
  run_op((const char*)op);
  return NULL;
}

static pthread_t g_worker;
static int g_have_worker;

/* The "w:" operations run on one long-lived second thread (so its ranges are those of
 * one thread), handed over one at a time. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static const char* g_pending;
static int g_quit;

static void* worker_loop(void* unused) {
  (void)unused;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (!g_pending && !g_quit) pthread_cond_wait(&g_cv, &g_mu);
    if (g_pending) {
      const char* op = g_pending;
      pthread_mutex_unlock(&g_mu);
      worker((void*)op);
      pthread_mutex_lock(&g_mu);
      g_pending = NULL;
      pthread_cond_broadcast(&g_cv);
    } else {
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void on_worker(const char* op) {
  if (!g_have_worker) {
    pthread_create(&g_worker, NULL, worker_loop, NULL);
    g_have_worker = 1;
  }
  pthread_mutex_lock(&g_mu);
  g_pending = op;
  pthread_cond_broadcast(&g_cv);
  while (g_pending) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

static void run(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (strncmp(argv[i], "loop:", 5) == 0) {
      int k = 0, n = 0;
      sscanf(argv[i] + 5, "%d:%d", &k, &n);
      if (n > argc - i - 1) n = argc - i - 1;
      for (int j = 0; j < k; ++j) run(n, argv + i + 1);
      i += n;
    } else if (strncmp(argv[i], "w:", 2) == 0) {
      on_worker(argv[i] + 2);
    } else {
      run_op(argv[i]);
    }
  }
}

int main(int argc, char** argv) {
  run(argc - 1, argv + 1);
  if (g_have_worker) {
    pthread_mutex_lock(&g_mu);
    g_quit = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(g_worker, NULL);
  }
  return 0;
}
