/* Segment rotation and the memory it holds (issue 20.6, ../shared/repros/leak_leak.c):
 * SEGMENTS new segments (nvtx_recorder_new_segment), one mark in each; prints how many
 * mappings of recording files the process holds before and after, and after the recording
 * folder is deleted: "before=N after=N deleted=N".
 *
 *   segment_rotation [SEGMENTS]
 */
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int count_maps(const char* needle) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[4096];
  int n = 0;
  while (f && fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
  if (f) fclose(f);
  return n;
}

int main(int argc, char** argv) {
  int segments = argc > 1 ? atoi(argv[1]) : 1000;
  nvtxMarkA("first");
  void* lib = dlopen(getenv("NVTX_INJECTION64_PATH"), RTLD_NOLOAD | RTLD_NOW);
  uint64_t (*new_segment)(void) = (uint64_t (*)(void))dlsym(lib, "nvtx_recorder_new_segment");
  if (!new_segment) return 3;
  int before = count_maps(".nvtxseg");
  for (int i = 0; i < segments; ++i) {
    new_segment();
    nvtxMarkA("m");
  }
  int after = count_maps(".nvtxseg");
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", getenv("NVTX_TF_RECORD_DIR"));
  if (system(cmd) != 0) return 4;
  printf("before=%d after=%d deleted=%d\n", before, after, count_maps("(deleted)"));
  return 0;
}
