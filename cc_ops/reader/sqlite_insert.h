// NVTX_EVENTS rows into an SQLite file from native code (the SQLite export's fast path,
// nvtx_plugins_tf/recorder/exports/_sqlite_native.py): the rows, already sorted and made
// into nsys's columns by Python (numpy), are bound with one prepared statement in one
// transaction, instead of one Python tuple per row through the sqlite3 module.
//
// SQLite itself is not linked: libsqlite3 is opened at run time with dlopen (the library
// Python's own sqlite3 module uses), so building needs no sqlite3.h; when it cannot be
// loaded, nvtxr_sqlite_available says so and Python writes the rows itself.
#ifndef NVTX_TF_READER_SQLITE_INSERT_H_
#define NVTX_TF_READER_SQLITE_INSERT_H_

#include <stdint.h>

#include "reader/decode.h"

// One NVTX_EVENTS row (packed; numpy mirror: _sqlite_native.SQL_ROW_DTYPE, 68 bytes).
#pragma pack(push, 1)
struct NvtxrSqlRow {
  int64_t start;
  int64_t end;       // if NVTXR_SQL_END
  int64_t range_id;  // if NVTXR_SQL_RANGE_ID
  int64_t global_tid;
  int64_t end_global_tid;  // if NVTXR_SQL_END_TID
  int64_t payload;         // by payload type (shape >> 8): int64, double bits, or a string index (jsonText)
  uint32_t text;           // string index (NVTXR_SQL_TEXT) or textId (NVTXR_SQL_TEXT_ID)
  uint32_t category;       // if NVTXR_SQL_CATEGORY
  uint32_t color;          // if NVTXR_SQL_COLOR
  uint32_t domain_id;
  uint16_t shape;  // NVTXR_SQL_* bits | payload type << 8
  uint16_t event_type;
};
#pragma pack(pop)

enum {
  NVTXR_SQL_END = 1 << 0,
  NVTXR_SQL_RANGE_ID = 1 << 1,
  NVTXR_SQL_END_TID = 1 << 2,
  NVTXR_SQL_COLOR = 1 << 3,
  NVTXR_SQL_CATEGORY = 1 << 4,
  NVTXR_SQL_TEXT = 1 << 5,
  NVTXR_SQL_TEXT_ID = 1 << 6,
};

// 1 when `library` (e.g. "libsqlite3.so.0") can be loaded and has every function used
// here, else 0 (err says why).
NVTXR_API int nvtxr_sqlite_available(const char* library, char* err, uint32_t err_len);

// Append rows[order[i]] for i < count to NVTX_EVENTS of the existing SQLite file `path`
// (its other content untouched), in that order, in one transaction. The rows are in
// blocks of 1 << block_bits rows: row r is blocks[r >> block_bits][r & mask]. Strings are
// UTF-8 in `strings`, string k spanning [offsets[k], offsets[k + 1]). Returns 0, else
// SQLite's extended result code, or -1 when `library` cannot be loaded, -2 for a bad
// argument; err gets the message.
NVTXR_API int nvtxr_sqlite_insert(const char* library, const char* path, const NvtxrSqlRow* const* blocks,
                                  int block_bits, const int64_t* order, int64_t count, const char* strings,
                                  const uint64_t* offsets, uint64_t string_count, char* err, uint32_t err_len);

#endif  // NVTX_TF_READER_SQLITE_INSERT_H_
