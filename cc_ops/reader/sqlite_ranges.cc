// ReadSqliteRanges (sqlite_ranges.h): the range rows of an SQLite export in nsys's schema
// read straight into analyze's native columns (range_columns.h), without a Python object a
// row (the sqlite3 module makes a tuple a row: most of the time of a large file). SQLite is
// opened at run time with dlopen (sqlite_api.h); the query is the caller's
// (nsys_inputs/batches.py: the rules of nsys_inputs/ranges.py).
//
// The caller's range query (kNvtxrSqliteRanges, kNvtxrSqliteRangesStringIds) is answered from NVTX_EVENTS'
// pages (sqlite_pages.h) when it can be exactly: SQLite still says what is small and
// semantic (the table's root page, its columns' places in a record, StringIds whole, all
// under one read transaction: no writer changes the file meanwhile); the rows are then
// those of the query, in its order (rowid), with its messages numbered in its order.
// Anything else, or any doubt, and the rows appended are dropped and the query runs.
#include "reader/sqlite_ranges.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reader/sqlite_api.h"
#include "reader/sqlite_pages.h"

namespace nvtx_reader {

namespace {

using sqlite::Api;
using sqlite::sqlite3;
using sqlite::sqlite3_stmt;

// The columns a range row needs, in the order the page scan decodes them (eventType first:
// the rows' filter).
enum Needed { kEventType, kStart, kEnd, kGlobalTid, kDomainId, kText, kTextId, kNeeded };
constexpr const char* kNames[kNeeded] = {"eventType", "start", "end", "globalTid", "domainId", "text", "textId"};

// StringIds (id -> value) read whole through SQLite; a value NULL: no registered string (the
// query's coalesce then takes the row's text).
struct Registered {
  std::unordered_map<int64_t, uint32_t> slot;
  std::vector<std::string> text;
  std::vector<uint8_t> null;
  std::vector<int64_t> message;  // its message's index, once a row used it (-1: not yet)
};

// A query of one row of results, each row handed to `row`; false (why) on an error.
template <typename Fn>
bool Query(const Api& api, sqlite3* db, const char* sql, std::string* why, Fn row) {
  sqlite3_stmt* stmt = nullptr;
  if (api.prepare_v2(db, sql, -1, &stmt, nullptr) != sqlite::kOk) {
    *why = api.errmsg(db);
    return false;
  }
  int rc;
  bool ok = true;
  while (ok && (rc = api.step(stmt)) == sqlite::kRow) ok = row(stmt);
  if (ok && rc != sqlite::kDone) {
    *why = api.errmsg(db);
    ok = false;
  }
  api.finalize(stmt);
  return ok;
}

// Message texts numbered as they first come (0: the empty message, NULL's too), for the
// page scan and the query alike; a small cache of the messages last seen in front of the
// index (rows mostly repeat a few messages: hashing each row's whole text was a fifth of the
// scan): two ways a set (two messages of one set alternating do not drive each other out),
// its set from the text's length and first and last eight bytes, which also tell a text of
// up to 16 bytes whole (no memcmp).
class MessageNumbers {
 public:
  MessageNumbers() { Number(std::string_view()); }
  uint32_t Number(std::string_view text) {
    Key key(text);
    Set& set = sets_[key.Slot()];
    for (int way = 0; way < 2; ++way) {
      const Recent& recent = set.way[way];
      if (recent.number != kNone && recent.key == key &&
          (text.size() <= 16 || memcmp(recent.text.data() + 8, text.data() + 8, text.size() - 16) == 0)) {
        set.older = static_cast<uint8_t>(1 - way);
        return recent.number;
      }
    }
    uint32_t n;
    std::string_view kept;
    auto found = index_.find(text);
    if (found != index_.end()) {
      n = found->second;
      kept = found->first;
    } else {
      texts_.emplace_back(text);
      n = static_cast<uint32_t>(texts_.size() - 1);
      kept = std::string_view(texts_.back());
      index_.emplace(kept, n);
    }
    set.way[set.older] = Recent{kept, key, n};
    set.older = static_cast<uint8_t>(1 - set.older);
    return n;
  }
  // The messages in the order they came.
  void Take(SqliteMessages* names) { names->values.assign(texts_.begin(), texts_.end()); }

 private:
  static constexpr int kRecentBits = 6;
  static constexpr uint32_t kNone = UINT32_MAX;
  // A text's length and its first and last eight bytes (zeros past its end).
  struct Key {
    uint64_t head = 0, tail = 0, size = 0;
    Key() = default;
    explicit Key(std::string_view text) : size(text.size()) {
      if (size) memcpy(&head, text.data(), size < 8 ? size : 8);
      if (size > 8) memcpy(&tail, text.data() + size - 8, 8);
    }
    bool operator==(const Key& o) const { return size == o.size && head == o.head && tail == o.tail; }
    size_t Slot() const {
      uint64_t h = (head ^ (tail * 0x9E3779B97F4A7C15ull) ^ size) * 0xFF51AFD7ED558CCDull;
      return static_cast<size_t>(h >> (64 - kRecentBits));
    }
  };
  struct Recent {
    std::string_view text;
    Key key;
    uint32_t number = kNone;
  };
  struct Set {
    Recent way[2];
    uint8_t older = 0;  // the way a miss replaces
  };
  Set sets_[1 << kRecentBits];
  std::deque<std::string> texts_;  // (a deque: its strings never move, the index's keys stay)
  std::unordered_map<std::string_view, uint32_t> index_;
};

// The page scan's rows appended as the query's would be.
class RangeSink : public sqlite_pages::RowSink {
 public:
  RangeSink(RangeColumns* columns, Registered* registered, SqliteCreates* creates, MessageNumbers* messages)
      : columns_(columns), registered_(registered), creates_(creates), messages_(messages) {}
  bool Wants(bool null, int64_t type) override {
    // the query's `eventType IN RANGE_TYPES` (nsys_inputs/ranges.py), and the domains' creations
    return !null && (type == 59 || type == 60 || type == 70 || type == 71 || type == kDomainCreate);
  }
  bool Add(const sqlite_pages::Row& row, std::string*) override {
    if (row.integer[kEventType] == kDomainCreate) {
      int64_t values[SqliteCreates::kCreateValues] = {row.integer[kStart],    row.null[kStart],        row.rowid,
                                                      row.integer[kDomainId], row.integer[kGlobalTid], row.null[kText]};
      creates_->values.insert(creates_->values.end(), values, values + SqliteCreates::kCreateValues);
      creates_->text.emplace_back(row.null[kText] ? "" : std::string(row.text[kText], row.text_size[kText]));
      return true;
    }
    uint32_t msg = 0;
    bool done = false;
    if (registered_ && !row.null[kTextId]) {  // coalesce(s.value, e.text)
      auto found = registered_->slot.find(row.integer[kTextId]);
      if (found != registered_->slot.end() && !registered_->null[found->second]) {
        int64_t& m = registered_->message[found->second];
        if (m < 0) m = messages_->Number(registered_->text[found->second]);
        msg = static_cast<uint32_t>(m);
        done = true;
      }
    }
    if (!done && !row.null[kText]) msg = messages_->Number(std::string_view(row.text[kText], row.text_size[kText]));
    columns_->rows++;
    columns_->AddExportRow(row.integer[kStart], row.integer[kEnd], row.null[kEnd], row.integer[kEventType],
                           row.integer[kGlobalTid], row.integer[kDomainId], msg);
    return true;
  }

 private:
  static constexpr int64_t kDomainCreate = 75;
  RangeColumns* columns_;
  Registered* registered_;
  SqliteCreates* creates_;
  MessageNumbers* messages_;
};

// The range rows read from the pages, if they can be exactly (else false, *note why: the
// caller drops the rows appended).
bool ReadPages(const Api& api, sqlite3* db, NvtxrSqliteQuery kind, RangeColumns* columns, SqliteMessages* names,
               SqliteCreates* creates, std::string* note) {
  // the table's root page
  int64_t root = -1;
  int roots = 0;
  if (!Query(api, db, "SELECT rootpage FROM sqlite_master WHERE type='table' AND name='NVTX_EVENTS'", note,
             [&](sqlite3_stmt* s) {
               roots++;
               root = api.column_type(s, 0) == sqlite::kInteger ? api.column_int64(s, 0) : -1;
               return true;
             })) {
    return false;
  }
  if (roots != 1 || root < 2 || root > 0xFFFFFFFFll) {
    *note = "no table NVTX_EVENTS with a root page";
    return false;
  }
  // its columns' places in a record (no hidden or generated column, none needed a key)
  sqlite_pages::Column cols[kNeeded];
  int wanted = kind == kNvtxrSqliteRangesStringIds ? kNeeded : kTextId;
  bool plain = true;
  int position = 0;
  if (!Query(api, db, "PRAGMA table_xinfo(NVTX_EVENTS)", note, [&](sqlite3_stmt* s) {
        const char* name = reinterpret_cast<const char*>(api.column_text(s, 1));
        bool hidden = api.column_int64(s, 6) != 0;
        if (hidden) plain = false;
        for (int j = 0; name && j < wanted; ++j) {
          if (strcasecmp(name, kNames[j]) != 0) continue;
          if (api.column_int64(s, 5) != 0) plain = false;  // (a key: maybe the rowid's alias)
          cols[j].position = position;
          cols[j].kind = j == kText ? sqlite_pages::Kind::kText : sqlite_pages::Kind::kInteger;
          cols[j].default_null = api.column_type(s, 4) == sqlite::kNull;
        }
        position++;
        return true;
      })) {
    return false;
  }
  if (!plain) {
    *note = "NVTX_EVENTS has a hidden or generated column, or a needed column is a key";
    return false;
  }
  for (int j = 0; j < wanted; ++j) {
    if (cols[j].position < 0) {
      *note = std::string("NVTX_EVENTS has no column ") + kNames[j];
      return false;
    }
  }
  // StringIds whole (ids unique integers: the LEFT JOIN then gives one row a row)
  Registered registered;
  if (kind == kNvtxrSqliteRangesStringIds) {
    bool unique = true;
    if (!Query(api, db, "SELECT id, value FROM StringIds", note, [&](sqlite3_stmt* s) {
          if (api.column_type(s, 0) != sqlite::kInteger) return unique = false;
          uint32_t at = static_cast<uint32_t>(registered.text.size());
          if (!registered.slot.emplace(api.column_int64(s, 0), at).second) return unique = false;
          bool null = api.column_type(s, 1) == sqlite::kNull;
          const unsigned char* p = null ? nullptr : api.column_text(s, 1);
          registered.text.emplace_back(p ? reinterpret_cast<const char*>(p) : "",
                                       p ? static_cast<size_t>(api.column_bytes(s, 1)) : 0);
          registered.null.push_back(null);
          registered.message.push_back(-1);
          return true;
        })) {
      if (!unique) *note = "StringIds' ids are not unique integers";
      return false;
    }
  }
  const char* path = api.db_filename(db, "main");
  if (!path || !*path) {
    *note = "no file name";
    return false;
  }
  sqlite_pages::File file;
  if (!file.Open(path, note)) return false;
  MessageNumbers messages;
  RangeSink sink(columns, kind == kNvtxrSqliteRangesStringIds ? &registered : nullptr, creates, &messages);
  if (!file.ScanTable(static_cast<uint32_t>(root), cols, wanted, &sink, note)) return false;
  messages.Take(names);
  creates->gathered = true;
  return true;
}

}  // namespace

int64_t ReadSqliteRanges(const char* library, const char* uri, const char* query, NvtxrSqliteQuery kind,
                         RangeColumns* columns, SqliteMessages* names, SqliteCreates* creates, bool* pages,
                         std::string* note, std::string* err) {
  using namespace sqlite;  // NOLINT (the API's names and constants, in this function)
  *pages = false;
  *creates = SqliteCreates();
  Api api;
  void* handle = sqlite::Load(library, &api, err);
  if (!handle) return -1;
  sqlite3* db = nullptr;
  int64_t added = 0;
  std::string why;
  try {
    if (api.open_v2(uri, &db, kOpenReadOnly | kOpenUri | kOpenNoMutex, nullptr) != kOk) {
      why = db ? api.errmsg(db) : "out of memory";
    } else if (kind != kNvtxrSqliteAny) {
      // one read transaction over the questions and the scan (the file unchanged meanwhile)
      RangeColumns::Extent before = columns->Mark();
      if (api.exec(db, "BEGIN", nullptr, nullptr, nullptr) == kOk) {
        try {
          *pages = ReadPages(api, db, kind, columns, names, creates, note);
        } catch (...) {
          *note = "out of memory";
        }
        api.exec(db, "COMMIT", nullptr, nullptr, nullptr);
      } else {
        *note = api.errmsg(db);
      }
      if (*pages) {
        added = static_cast<int64_t>(columns->size() - before.ranges);
      } else {
        // the query on a connection of its own, as without the pages (SQLite's reading of a
        // damaged file may depend on what its cache already holds)
        columns->Rollback(before);
        *creates = SqliteCreates();
        api.close(db);
        db = nullptr;
        if (api.open_v2(uri, &db, kOpenReadOnly | kOpenUri | kOpenNoMutex, nullptr) != kOk) {
          why = db ? api.errmsg(db) : "out of memory";
        }
      }
    }
    if (why.empty() && !*pages) {
      MessageNumbers messages;
      if (Query(api, db, query, &why, [&](sqlite3_stmt* row) {
            bool open = api.column_type(row, 1) == kNull;
            uint32_t msg = 0;
            if (api.column_type(row, 5) != kNull) {
              const char* p = reinterpret_cast<const char*>(api.column_text(row, 5));
              msg = messages.Number(std::string_view(p, static_cast<size_t>(api.column_bytes(row, 5))));
            }
            columns->rows++;
            added += columns->AddExportRow(api.column_int64(row, 0), open ? 0 : api.column_int64(row, 1), open,
                                           api.column_int64(row, 2), api.column_int64(row, 3), api.column_int64(row, 4),
                                           msg);
            return true;
          })) {
        messages.Take(names);
      }
    }
  } catch (...) {
    why = "out of memory";
  }
  if (db) api.close(db);
  if (!why.empty()) {
    *err = why;
    return -1;
  }
  return added;
}

}  // namespace nvtx_reader
