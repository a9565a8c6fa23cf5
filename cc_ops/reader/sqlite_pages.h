// An SQLite file's table read straight from its pages (https://www.sqlite.org/fileformat2.html),
// without SQLite's virtual machine: the file read with pread, the table b-tree walked in
// order (rowid ascending, as `ORDER BY rowid` returns the rows), each record's few needed
// columns decoded, long records assembled from their overflow pages. For the range rows of
// an nsys export (sqlite_ranges.cc: what the table is and which columns, asked of SQLite;
// its libsqlite query stays the reference and the way taken whenever this one gives up).
//
// Everything read is bounds-checked; anything this reader does not know for certain to read
// as SQLite would (another text encoding, a WAL file, a page out of range or seen twice, a
// tree deeper than kMaxDepth, a record or cell out of bounds, a value of a type the caller
// did not allow) makes it give up with the reason, never guess.
#ifndef NVTX_PLUGINS_TF_READER_SQLITE_PAGES_H_
#define NVTX_PLUGINS_TF_READER_SQLITE_PAGES_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

namespace nvtx_reader {
namespace sqlite_pages {

constexpr int kMaxDepth = 32;  // interior levels (SQLite's own limit is 20)
constexpr int kMaxColumns = 8;

// What a column may hold (else the scan gives up): NULL or an integer; NULL or text.
enum class Kind : uint8_t { kInteger, kText };

// A column to decode: its position in the record (a table's columns in order), its kind, and
// whether a record too short to hold it reads it as NULL (its DEFAULT is NULL; else the
// scan gives up on such a record).
struct Column {
  int position = -1;
  Kind kind = Kind::kInteger;
  bool default_null = true;
};

// One row's decoded columns (the order of the columns asked for); text: valid until the
// next row.
struct Row {
  int64_t rowid = 0;
  int64_t integer[kMaxColumns];
  bool null[kMaxColumns];
  const char* text[kMaxColumns];
  size_t text_size[kMaxColumns];
};

// Receives the rows. Wants: whether the row whose first column (an integer, or null) holds
// `value` is wanted (the other columns then decoded and Add called); Add: false stops the
// scan (the reason in *why).
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual bool Wants(bool null, int64_t value) = 0;
  virtual bool Add(const Row& row, std::string* why) = 0;
};

// A database file opened read-only, its header checked: "SQLite format 3", a valid page size,
// UTF-8 text, rollback-journal mode (no WAL), no hot journal or live WAL file beside it.
class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();
  bool Open(const char* path, std::string* why);
  // Walks the table b-tree rooted at page `root`, decoding `columns` (n of them, the first
  // one tested by sink->Wants) of each row, in rowid order. False (why) when it gave up:
  // the sink may have received rows by then.
  bool ScanTable(uint32_t root, const Column* columns, int n, RowSink* sink, std::string* why) const;

 private:
  // The pages read through a window of kWindowBytes (pread, never mapped: a file truncated
  // while read or an I/O error is a read that fails, never a SIGBUS).
  struct Window {
    std::vector<uint8_t> bytes;
    uint64_t first = 0, count = 0;  // pages first .. first + count - 1 held
  };
  // Page `number` (in range): in the window (valid until the window's next read), or
  // nullptr when it cannot be read whole (*why).
  const uint8_t* Page(uint32_t number, Window* w, std::string* why) const;
  // `n` bytes at `offset` into dst; false when fewer could be read.
  bool ReadAt(uint64_t offset, size_t n, uint8_t* dst) const;
  bool Payload(const uint8_t* cell, const uint8_t* page_end, uint64_t size, std::vector<uint8_t>* seen,
               const uint8_t** out, std::string* scratch, std::string* why) const;

  int fd_ = -1;
  uint64_t size_ = 0;
  uint32_t page_size_ = 0, usable_ = 0, pages_ = 0;
};

}  // namespace sqlite_pages
}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_SQLITE_PAGES_H_
