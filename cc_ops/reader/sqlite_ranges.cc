// nvtxr_ranges_add_sqlite's reading (sqlite_ranges.h, decode.h ABI 11): the range rows of an SQLite export in nsys's
// schema read straight into analyze's native columns (range_columns.h), without a Python
// object per row (the sqlite3 module makes a tuple a row: most of the time of a large
// file). SQLite is opened at run time with dlopen, as sqlite_insert.cc does; the query is
// the caller's (reports/_export_batches.py: the rules of reports/_export_ranges.py), its
// columns start, end, eventType, globalTid, domainId, the message text. The messages are
// numbered by text as they first come (NULL: the empty message, number 0).
#include "reader/sqlite_ranges.h"

#include <dlfcn.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct sqlite3;
struct sqlite3_stmt;

constexpr int kOk = 0;
constexpr int kRow = 100;
constexpr int kDone = 101;
constexpr int kOpenReadOnly = 0x00000001;
constexpr int kOpenUri = 0x00000040;
constexpr int kNull = 5;

struct Api {
  int (*open_v2)(const char*, sqlite3**, int, const char*);
  int (*close)(sqlite3*);
  int (*prepare_v2)(sqlite3*, const char*, int, sqlite3_stmt**, const char**);
  int (*step)(sqlite3_stmt*);
  int (*finalize)(sqlite3_stmt*);
  const char* (*errmsg)(sqlite3*);
  long long (*column_int64)(sqlite3_stmt*, int);
  int (*column_type)(sqlite3_stmt*, int);
  const unsigned char* (*column_text)(sqlite3_stmt*, int);
  int (*column_bytes)(sqlite3_stmt*, int);
};

bool Load(const char* library, Api* api, std::string* err) {
  void* handle = library ? dlopen(library, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!handle) {
    const char* why = library ? dlerror() : "no library named";
    *err = why ? why : "dlopen failed";
    return false;
  }
  struct Symbol {
    const char* name;
    void** slot;
  } symbols[] = {
      {"sqlite3_open_v2", reinterpret_cast<void**>(&api->open_v2)},
      {"sqlite3_close", reinterpret_cast<void**>(&api->close)},
      {"sqlite3_prepare_v2", reinterpret_cast<void**>(&api->prepare_v2)},
      {"sqlite3_step", reinterpret_cast<void**>(&api->step)},
      {"sqlite3_finalize", reinterpret_cast<void**>(&api->finalize)},
      {"sqlite3_errmsg", reinterpret_cast<void**>(&api->errmsg)},
      {"sqlite3_column_int64", reinterpret_cast<void**>(&api->column_int64)},
      {"sqlite3_column_type", reinterpret_cast<void**>(&api->column_type)},
      {"sqlite3_column_text", reinterpret_cast<void**>(&api->column_text)},
      {"sqlite3_column_bytes", reinterpret_cast<void**>(&api->column_bytes)},
  };
  for (const Symbol& s : symbols) {
    *s.slot = dlsym(handle, s.name);
    if (!*s.slot) {
      *err = std::string(library) + " has no " + s.name;
      dlclose(handle);
      return false;
    }
  }
  return true;  // (kept loaded: the process's sqlite3 module holds it anyway)
}

}  // namespace

namespace nvtx_reader {

int64_t ReadSqliteRanges(const char* library, const char* uri, const char* query, RangeColumns* columns,
                         SqliteMessages* names, std::string* err) {
  Api api;
  if (!Load(library, &api, err)) return -1;
  sqlite3* db = nullptr;
  sqlite3_stmt* stmt = nullptr;
  int64_t added = 0;
  std::string why;
  try {
    if (api.open_v2(uri, &db, kOpenReadOnly | kOpenUri, nullptr) != kOk ||
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
