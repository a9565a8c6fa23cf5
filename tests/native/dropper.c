/* dropper.c: a dropped event on demand (tests/test_recorder_review4.py; ../shared/repros/dropper.c).
 * Built as a library (-shared -fPIC): mark(m) marks; end_of_dropped_start() ends a start the
 * recorder dropped (bit 39 | bit 38 in its range id, segment_writer.h): counted as a dropped
 * event, nothing written (callbacks.cc EndImpl). */
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>

void mark(const char* m) { nvtxMarkA(m); }
void end_of_dropped_start(void) { nvtxRangeEnd(((uint64_t)1 << 39) | ((uint64_t)1 << 38) | 5); }
