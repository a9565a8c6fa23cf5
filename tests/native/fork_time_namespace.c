/* A forked child on another clock than its parent (issue 20.11): the parent registers a
 * string past the registry's cap (so it is never re-emitted: the child's events name it
 * through the parent link of its segment header, parent_pid + parent_process_start_ns),
 * marks with it, then enters a new time namespace whose CLOCK_MONOTONIC is OFFSET_NS
 * ahead (unshare(CLONE_NEWTIME): for the children forked afterwards) and forks; the child
 * marks with the registered string and with "child".
 *
 * Exit 77 when time namespaces are unavailable (not root, Linux < 5.6).
 *
 *   fork_time_namespace OFFSET_NS
 */
#define _GNU_SOURCE
#include <nvtx3/nvToolsExt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define FILLERS 8192 /* kMaxRegisteredStrings (cc_ops/recorder/registry.h) */

static void mark_registered(nvtxDomainHandle_t d, nvtxStringHandle_t s, uint64_t payload) {
  nvtxEventAttributes_t a = {0};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
  a.payload.ullValue = payload;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = s;
  nvtxDomainMarkEx(d, &a);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const long long offset_ns = atoll(argv[1]);
  nvtxDomainHandle_t d = nvtxDomainCreateA("fork");
  char text[32];
  for (int j = 0; j < FILLERS; ++j) {
    snprintf(text, sizeof text, "filler%d", j);
    nvtxDomainRegisterStringA(d, text);
  }
  nvtxStringHandle_t inherited = nvtxDomainRegisterStringA(d, "inherited");
  mark_registered(d, inherited, 1);
  nvtxMarkA("parent");

  if (unshare(CLONE_NEWTIME) != 0) return 77;
  FILE* f = fopen("/proc/self/timens_offsets", "w");
  if (!f) return 77;
  fprintf(f, "monotonic %lld %lld\n", offset_ns / 1000000000, offset_ns % 1000000000);
  if (fclose(f) != 0) return 77;

  pid_t child = fork();
  if (child == 0) {
    mark_registered(d, inherited, 2);
    nvtxMarkA("child");
    _exit(0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
  nvtxMarkA("parent after");
  return 0;
}
