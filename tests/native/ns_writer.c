/* ns_writer.c: records N push/pop pairs; then, as its second argument says, waits until the
 * file GO exists and records N more ("GO"), kills itself ("kill": SIGKILL, its segment never
 * closed), or ends (none). Prints how many pairs it emitted. (../shared/repros/ns_writer.c,
 * for tests/test_recorder_review4.py: run under `unshare --pid --fork [--uts]`.)
 *
 *   ns_writer N [GO | kill]
 */
#include <nvtx3/nvToolsExt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void pairs(int n) {
  for (int i = 0; i < n; ++i) {
    nvtxRangePushA("tick");
    nvtxRangePop();
  }
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 300;
  const char* then = argc > 2 ? argv[2] : NULL;
  pairs(n);
  int emitted = n;
  if (then && strcmp(then, "kill") == 0) raise(SIGKILL);
  if (then) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (access(then, F_OK) != 0) nanosleep(&ts, NULL);
    pairs(n);
    emitted += n;
  }
  printf("pid(in its namespace)=%d emitted push/pop ranges=%d\n", (int)getpid(), emitted);
  return 0;
}
