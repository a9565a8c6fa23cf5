/* String ids across the end of their range (issue 20.10). After its first events the
 * program moves the recorder's per-segment string id counter to LEFT ids before its end
 * (nvtx_recorder_test_string_ids_near_end, a control function for tests), then two threads
 * record COUNT unique messages each, so the ids run past the end; registered strings made
 * before (one past the registry's cap: never re-emitted) keep being used, a range stays
 * open across the end, and a forked child uses the registered strings too.
 *
 * Every event carries a u64 payload P that tells its name:
 *   P < 10000000                          "m<P>"        (ASCII messages, interned)
 *   10000000 + K                          "reg<K>"      (registered in domain "wrap")
 *   20000000                              "outer"       (push before the end, pop after)
 *   30000000 + K                          "late<K>"     (registered after LASTING_LEFT was set)
 *
 * With LASTING_LEFT, the lasting ids (registered strings) are then moved to LASTING_LEFT
 * before their end and three more strings registered, each used by one mark.
 *
 *   string_id_wrap LEFT COUNT [LASTING_LEFT]
 */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define REGISTERED 4 /* reg0..reg3; reg3 is registered past the registry's cap */
#define FILLERS 8192 /* kMaxRegisteredStrings (cc_ops/recorder/registry.h) */

static nvtxDomainHandle_t domain;
static nvtxStringHandle_t reg[REGISTERED];

static nvtxEventAttributes_t attrs(uint64_t payload) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = payload;
  return a;
}

static void mark(uint64_t p) {
  char text[32];
  snprintf(text, sizeof text, "m%llu", (unsigned long long)p);
  nvtxEventAttributes_t a = attrs(p);
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = text;
  nvtxDomainMarkEx(domain, &a);
}

static void registered_range(int k) {
  nvtxEventAttributes_t a = attrs(10000000 + k);
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = reg[k];
  nvtxDomainRangePushEx(domain, &a);
  nvtxDomainRangePop(domain);
}

struct Work {
  uint64_t first;
  int count;
};

static void* record(void* arg) {
  const struct Work* w = arg;
  for (int i = 0; i < w->count; ++i) {
    mark(w->first + (uint64_t)i);
    if (i % 16 == 0) registered_range(i / 16 % REGISTERED);
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) return 2;
  const uint32_t left = (uint32_t)strtoul(argv[1], NULL, 0);
  const int count = atoi(argv[2]);
  domain = nvtxDomainCreateA("wrap");
  char text[32];
  for (int k = 0; k < REGISTERED - 1; ++k) {
    snprintf(text, sizeof text, "reg%d", k);
    reg[k] = nvtxDomainRegisterStringA(domain, text);
  }
  for (int j = 0; j < FILLERS; ++j) {
    snprintf(text, sizeof text, "filler%d", j);
    nvtxDomainRegisterStringA(domain, text);
  }
  reg[REGISTERED - 1] = nvtxDomainRegisterStringA(domain, "reg3");
  for (uint64_t p = 0; p < 10; ++p) mark(p);
  for (int k = 0; k < REGISTERED; ++k) registered_range(k);

  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  void (*near_end)(uint32_t, uint32_t) =
      lib ? (void (*)(uint32_t, uint32_t))dlsym(lib, "nvtx_recorder_test_string_ids_near_end") : NULL;
  if (!near_end) return 3;
  near_end(left, 0);

  nvtxEventAttributes_t outer = attrs(20000000);
  outer.messageType = NVTX_MESSAGE_TYPE_ASCII;
  outer.message.ascii = "outer";
  nvtxDomainRangePushEx(domain, &outer);
  struct Work mine = {1000, count}, theirs = {5000000, count};
  pthread_t t;
  if (pthread_create(&t, NULL, record, &theirs) != 0) return 4;
  record(&mine);
  pthread_join(t, NULL);
  for (uint64_t p = 0; p < 10; ++p) mark(p); /* the early texts again */
  nvtxDomainRangePop(domain);

  if (argc == 4) {
    near_end(0, (uint32_t)strtoul(argv[3], NULL, 0));
    for (int k = 0; k < 3; ++k) {
      snprintf(text, sizeof text, "late%d", k);
      nvtxEventAttributes_t a = attrs(30000000 + k);
      a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
      a.message.registered = nvtxDomainRegisterStringA(domain, text);
      nvtxDomainMarkEx(domain, &a);
    }
  }

  pid_t child = fork();
  if (child == 0) {
    for (int k = 0; k < REGISTERED; ++k) registered_range(k);
    mark(9000000);
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
  return 0;
}
