// Trace Event JSON lines of decoded rows, formatted natively for
// nvtx_plugins_tf/recorder/exports/trace_json.py (JsonSink): the Python loop that formatted
// them was most of the time of a JSON export. Byte for byte what that module's Python
// formatter (_python_lines) writes; the JSON escaping of the strings stays in Python (json.dumps),
// done once per string: this code only copies the escaped texts it is given.
#ifndef NVTX_PLUGINS_TF_READER_JSON_LINES_H_
#define NVTX_PLUGINS_TF_READER_JSON_LINES_H_

#include <stdint.h>

#include "reader/decode.h"

// Entry i of a table of texts: text[offsets[i] .. offsets[i + 1]) (offsets holds count + 1 values).
struct NvtxrTextTable {
  const char* text;
  const uint64_t* offsets;
  uint64_t count;
};

// ABI 9: the JSON lines of rows[0 .. count), separated by ",\n" (none before the first
// nor after the last), into out (capacity bytes). Timestamps are relative to origin_ns.
// names: the escaped message of each global string index (with its quotes); domains: the
// escaped "cat" of each global domain index. extra_index[i] >= 0 names the text of
// extras that replaces what follows "domain":... in row i's args up to its depth /
// range_id (category, color and payload: the rows whose category name or payload only
// Python formats); -1: the color and an integer payload are formatted here. *async_id
// numbers the start/end ranges (in: the last id given, out: the new last).
// Returns the count of rows written (whole rows only; *written gets their bytes). 0 when
// the first row does not fit: then *written gets a capacity that fits it. -1 when a row
// names a string, domain or extra beyond its table (nothing usable written).
NVTXR_API int64_t nvtxr_json_lines(const NvtxrRow* rows, int64_t count, int64_t origin_ns, const NvtxrTextTable* names,
                                   const NvtxrTextTable* domains, const NvtxrTextTable* extras,
                                   const int64_t* extra_index, uint64_t* async_id, char* out, uint64_t capacity,
                                   uint64_t* written);

#endif  // NVTX_PLUGINS_TF_READER_JSON_LINES_H_
