// ReadSqliteRanges (sqlite_ranges.h): the range rows of an SQLite export in nsys's schema
// read straight into analyze's native columns (range_columns.h), without a Python object a
// row (the sqlite3 module makes a tuple a row: most of the time of a large file). SQLite is
// opened at run time with dlopen (sqlite_api.h); the query is the caller's
// (nsys_inputs/batches.py: the rules of nsys_inputs/ranges.py).
#include "reader/sqlite_ranges.h"

#include <string>

#include "reader/sqlite_api.h"

namespace nvtx_reader {

int64_t ReadSqliteRanges(const char* library, const char* uri, const char* query, RangeColumns* columns,
                         SqliteMessages* names, std::string* err) {
  using namespace sqlite;  // NOLINT (the API's names and constants, in this function)
  Api api;
  void* handle = sqlite::Load(library, &api, err);
  if (!handle) return -1;
  sqlite3* db = nullptr;
  sqlite3_stmt* stmt = nullptr;
  int64_t added = 0;
  std::string why;
  try {
    if (api.open_v2(uri, &db, kOpenReadOnly | kOpenUri | kOpenNoMutex, nullptr) != kOk ||
        api.prepare_v2(db, query, -1, &stmt, nullptr) != kOk) {
      why = db ? api.errmsg(db) : "out of memory";
    } else {
      names->index.clear();
      names->values.assign(1, std::string());
      names->index.emplace(std::string(), 0);
      std::string text;
      int rc;
      while ((rc = api.step(stmt)) == kRow) {
        bool open = api.column_type(stmt, 1) == kNull;
        uint32_t msg = 0;
        if (api.column_type(stmt, 5) != kNull) {
          const unsigned char* p = api.column_text(stmt, 5);
          text.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(api.column_bytes(stmt, 5)));
          auto found = names->index.find(text);
          if (found == names->index.end()) {
            found = names->index.emplace(text, static_cast<uint32_t>(names->values.size())).first;
            names->values.push_back(text);
          }
          msg = found->second;
        }
        columns->rows++;
        added +=
            columns->AddExportRow(api.column_int64(stmt, 0), open ? 0 : api.column_int64(stmt, 1), open,
                                  api.column_int64(stmt, 2), api.column_int64(stmt, 3), api.column_int64(stmt, 4), msg);
      }
      if (rc != kDone) why = api.errmsg(db);
    }
  } catch (...) {
    why = "out of memory";
  }
  if (stmt) api.finalize(stmt);
  if (db) api.close(db);
  if (!why.empty()) {
    *err = why;
    return -1;
  }
  return added;
}

}  // namespace nvtx_reader
