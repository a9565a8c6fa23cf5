// The range rows of an SQLite export in nsys's schema read natively into analyze's columns
// (sqlite_ranges.cc; the C API: decode.h, nvtxr_ranges_add_sqlite, ABI 11).
#ifndef NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_
#define NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_

#include <stdint.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "reader/range_columns.h"

namespace nvtx_reader {

// The message texts read, numbered as they first came (0: NULL, the empty message).
struct SqliteMessages {
  std::unordered_map<std::string, uint32_t> index;
  std::vector<std::string> values;
};

// Runs `query` (its columns: start, end, eventType, globalTid, domainId, the message) on the
// SQLite file `uri` (a file: URI, opened read-only) with the SQLite library `library`
// (dlopen), each row appended by RangeColumns::AddExportRow; the ranges added, or -1 (*err).
int64_t ReadSqliteRanges(const char* library, const char* uri, const char* query, RangeColumns* columns,
                         SqliteMessages* messages, std::string* err);

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_
