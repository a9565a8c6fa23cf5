// SQLite's C API through dlopen, for the reader's two uses of it (sqlite_insert.cc: the
// SQLite export's rows written; sqlite_ranges.cc: an SQLite export's ranges read for
// analyze). SQLite itself is not linked: libsqlite3 (the library Python's own sqlite3 module
// uses) is opened at run time. The prototypes are SQLite's stable C interface (unchanged
// since 3.5), declared here so that no sqlite3.h is needed to build.
#ifndef NVTX_PLUGINS_TF_READER_SQLITE_API_H_
#define NVTX_PLUGINS_TF_READER_SQLITE_API_H_

#include <stdint.h>

#include <string>

namespace nvtx_reader {
namespace sqlite {

struct sqlite3;
struct sqlite3_stmt;

constexpr int kOk = 0;
constexpr int kRow = 100;
constexpr int kDone = 101;
constexpr int kInteger = 1;  // SQLITE_INTEGER, a column's type
constexpr int kNull = 5;     // SQLITE_NULL
constexpr int kOpenReadOnly = 0x00000001;
constexpr int kOpenReadWrite = 0x00000002;
constexpr int kOpenUri = 0x00000040;
constexpr int kOpenNoMutex = 0x00008000;

// The functions used, resolved from one dlopen-ed library.
struct Api {
  int (*open_v2)(const char*, sqlite3**, int, const char*);
  int (*close)(sqlite3*);
  int (*exec)(sqlite3*, const char*, int (*)(void*, int, char**, char**), void*, char**);
  int (*prepare_v2)(sqlite3*, const char*, int, sqlite3_stmt**, const char**);
  int (*bind_int64)(sqlite3_stmt*, int, long long);
  int (*bind_double)(sqlite3_stmt*, int, double);
  int (*bind_text)(sqlite3_stmt*, int, const char*, int, void (*)(void*));
  int (*bind_null)(sqlite3_stmt*, int);
  int (*step)(sqlite3_stmt*);
  int (*reset)(sqlite3_stmt*);
  int (*finalize)(sqlite3_stmt*);
  int (*extended_errcode)(sqlite3*);
  const char* (*errmsg)(sqlite3*);
  void (*free)(void*);
  long long (*column_int64)(sqlite3_stmt*, int);
  int (*column_type)(sqlite3_stmt*, int);
  const unsigned char* (*column_text)(sqlite3_stmt*, int);
  int (*column_bytes)(sqlite3_stmt*, int);
  const char* (*db_filename)(sqlite3*, const char*);
};

// The library loaded and its functions, or nullptr (err says why). Loaded once per process
// in a link-map namespace of its own (sqlite_api.cc says why) and kept: never dlclose it.
void* Load(const char* library, Api* api, std::string* err);

// `message` into the caller's buffer err (err_len bytes, NUL-terminated; none when NULL).
void SetError(char* err, uint32_t err_len, const std::string& message);

}  // namespace sqlite
}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_SQLITE_API_H_
