// nvtxr_sqlite_insert (sqlite_insert.h): SQLite's C API through dlopen (sqlite_api.h).
#include "reader/sqlite_insert.h"

#include <string.h>

#include <algorithm>
#include <string>

#include "reader/sqlite_api.h"

namespace {

using nvtx_reader::sqlite::Api;
using nvtx_reader::sqlite::kDone;
using nvtx_reader::sqlite::kOk;
using nvtx_reader::sqlite::kOpenNoMutex;
using nvtx_reader::sqlite::kOpenReadWrite;
using nvtx_reader::sqlite::Load;
using nvtx_reader::sqlite::SetError;
using nvtx_reader::sqlite::sqlite3;
using nvtx_reader::sqlite::sqlite3_stmt;

// Columns bound, in this order (NVTX_EVENTS's own order; jsonTextId is always NULL).
constexpr const char* kInsert =
    "INSERT INTO NVTX_EVENTS (start, end, eventType, rangeId, category, color, text, globalTid, "
    "endGlobalTid, textId, domainId, uint64Value, int64Value, doubleValue, uint32Value, int32Value, "
    "floatValue, jsonText) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr int kStart = 1, kEnd = 2, kEventType = 3, kRangeId = 4, kCategory = 5, kColor = 6, kText = 7, kGlobalTid = 8,
              kEndGlobalTid = 9, kTextId = 10, kDomainId = 11, kPayload0 = 11,  // + type 1..6
    kJsonText = 18;
constexpr int kPayloadDouble = 3, kPayloadFloat = 6, kPayloadExt = 7;

class Writer {
 public:
  Writer(const Api& api, const char* strings, const uint64_t* offsets, uint64_t string_count)
      : api_(api), strings_(strings), offsets_(offsets), string_count_(string_count) {}
  ~Writer() {
    if (stmt_) api_.finalize(stmt_);
    if (db_) api_.close(db_);
  }

  int Run(const char* path, const NvtxrSqlRow* const* blocks, int block_bits, const int64_t* order, int64_t count,
          std::string* err) {
    const int64_t mask = (int64_t{1} << block_bits) - 1;
    int rc = api_.open_v2(path, &db_, kOpenReadWrite | kOpenNoMutex, nullptr);
    if (rc != kOk) return Fail(rc, err);
    // The file is a fresh export nobody else has open; a crash leaves it to be discarded.
    rc = api_.exec(db_,
                   "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE; "
                   "PRAGMA cache_size=-65536; BEGIN",
                   nullptr, nullptr, nullptr);
    if (rc != kOk) return Fail(rc, err);
    rc = api_.prepare_v2(db_, kInsert, -1, &stmt_, nullptr);
    if (rc != kOk) return Fail(rc, err);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t r = order[i];
      const NvtxrSqlRow& row = blocks[r >> block_bits][r & mask];
      rc = Bind(row);
      if (rc != kOk) {
        if (rc < 0) {
          *err = "a row names a string index out of range";
          return -2;
        }
        return Fail(rc, err);
      }
      if (api_.step(stmt_) != kDone) return Fail(api_.reset(stmt_), err);
      api_.reset(stmt_);
    }
    api_.finalize(stmt_);
    stmt_ = nullptr;
    rc = api_.exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    if (rc != kOk) return Fail(rc, err);
    rc = api_.close(db_);
    db_ = nullptr;
    return rc;
  }

 private:
  int Fail(int rc, std::string* err) {
    if (db_) {
      rc = api_.extended_errcode(db_);
      *err = api_.errmsg(db_);
    } else {
      *err = "cannot open the database";
    }
    return rc != kOk ? rc : -1;
  }

  // Binding a parameter costs about as much as the rest of a row's insert, so NULLs are
  // bound only when a parameter was not NULL already (bindings outlive sqlite3_reset).
  int Null(int column) {
    const uint32_t bit = 1u << column;
    if (nulls_ & bit) return kOk;
    nulls_ |= bit;
    return api_.bind_null(stmt_, column);
  }

  int Int(int column, long long value) {
    nulls_ &= ~(1u << column);
    return api_.bind_int64(stmt_, column, value);
  }

  int Int(int column, bool present, long long value) { return present ? Int(column, value) : Null(column); }

  // Binds string `index` to parameter `column` (SQLITE_STATIC: the strings outlive the
  // statement); -1 when out of range.
  int Text(int column, uint64_t index) {
    if (index >= string_count_) return -1;
    nulls_ &= ~(1u << column);
    uint64_t begin = offsets_[index], end = offsets_[index + 1];
    return api_.bind_text(stmt_, column, strings_ + begin, static_cast<int>(end - begin), nullptr);
  }

  int Bind(const NvtxrSqlRow& row) {
    const unsigned shape = row.shape;
    int rc = Int(kStart, row.start);
    rc |= Int(kEnd, shape & NVTXR_SQL_END, row.end);
    rc |= Int(kEventType, row.event_type);
    rc |= Int(kRangeId, shape & NVTXR_SQL_RANGE_ID, row.range_id);
    rc |= Int(kCategory, shape & NVTXR_SQL_CATEGORY, row.category);
    rc |= Int(kColor, shape & NVTXR_SQL_COLOR, row.color);
    if (shape & NVTXR_SQL_TEXT) {
      int t = Text(kText, row.text);
      if (t < 0) return t;
      rc |= t;
    } else {
      rc |= Null(kText);
    }
    rc |= Int(kGlobalTid, row.global_tid);
    rc |= Int(kEndGlobalTid, shape & NVTXR_SQL_END_TID, row.end_global_tid);
    rc |= Int(kTextId, shape & NVTXR_SQL_TEXT_ID, row.text);
    rc |= Int(kDomainId, row.domain_id);
    const int payload_type = shape >> 8;
    for (int t = 1; t <= 6; ++t) {
      if (t != payload_type) {
        rc |= Null(kPayload0 + t);
      } else if (t == kPayloadDouble || t == kPayloadFloat) {
        double value;
        memcpy(&value, &row.payload, sizeof value);
        nulls_ &= ~(1u << (kPayload0 + t));
        rc |= api_.bind_double(stmt_, kPayload0 + t, value);
      } else {
        rc |= Int(kPayload0 + t, row.payload);
      }
    }
    if (payload_type == kPayloadExt) {
      int t = Text(kJsonText, static_cast<uint64_t>(row.payload));
      if (t < 0) return t;
      rc |= t;
    } else {
      rc |= Null(kJsonText);
    }
    return rc;
  }

  const Api& api_;
  const char* strings_;
  const uint64_t* offsets_;
  uint64_t string_count_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  uint32_t nulls_ = ~0u;  // bit k: parameter k is bound to NULL (all are, unbound)
};

}  // namespace

NVTXR_API int nvtxr_sqlite_available(const char* library, char* err, uint32_t err_len) {
  Api api;
  std::string why;
  void* handle = Load(library, &api, &why);
  if (!handle) {
    SetError(err, err_len, why);
    return 0;
  }
  return 1;
}

NVTXR_API int nvtxr_sqlite_insert(const char* library, const char* path, const NvtxrSqlRow* const* blocks,
                                  int block_bits, const int64_t* order, int64_t count, const char* strings,
                                  const uint64_t* offsets, uint64_t string_count, char* err, uint32_t err_len) {
  if (!path || count < 0 || (count > 0 && (!blocks || !order)) || block_bits < 0 || block_bits > 40 ||
      (string_count > 0 && (!strings || !offsets))) {
    SetError(err, err_len, "bad argument");
    return -2;
  }
  Api api;
  std::string why;
  void* handle = Load(library, &api, &why);
  if (!handle) {
    SetError(err, err_len, why);
    return -1;
  }
  int rc;
  try {
    Writer writer(api, strings, offsets, string_count);
    rc = writer.Run(path, blocks, block_bits, order, count, &why);
  } catch (...) {
    why = "out of memory";
    rc = -2;
  }
  if (rc != 0) SetError(err, err_len, why);
  return rc;
}
