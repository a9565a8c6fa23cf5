// The range rows of an SQLite export in nsys's schema read natively into analyze's columns
// (sqlite_ranges.cc; the C API: decode.h, nvtxr_ranges_add_sqlite, ABI 13).
#ifndef NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_
#define NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_

#include <stdint.h>

#include <string>
#include <vector>

#include "reader/range_columns.h"

namespace nvtx_reader {

// The message texts read, numbered as they first came (0: NULL, the empty message).
struct SqliteMessages {
  std::vector<std::string> values;
};

// The domains' creations (eventType 75) the page scan met, in rowid order (gathered: whether
// it did): each row's start, whether it is NULL, its rowid, domainId and globalTid (NULL: 0),
// whether its text is NULL (kCreateValues a row), and its text.
struct SqliteCreates {
  static constexpr int kCreateValues = 6;
  bool gathered = false;
  std::vector<int64_t> values;
  std::vector<std::string> text;
};

// Runs `query` (its columns: start, end, eventType, globalTid, domainId, the message) on the
// SQLite file `uri` (a file: URI, opened read-only) with the SQLite library `library`
// (dlopen), each row appended by RangeColumns::AddExportRow; the ranges added, or -1 (*err).
// When `kind` (decode.h) names the range query, its rows are read from the table's pages instead
// (sqlite_pages.h), the same rows and messages, and the domains' creations into *creates;
// *pages: whether they were (if not, *note says why; the query then ran).
int64_t ReadSqliteRanges(const char* library, const char* uri, const char* query, NvtxrSqliteQuery kind,
                         RangeColumns* columns, SqliteMessages* messages, SqliteCreates* creates, bool* pages,
                         std::string* note, std::string* err);

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_SQLITE_RANGES_H_
