// File (sqlite_pages.h): an SQLite table b-tree walked straight from the file (pread). The
// layout is SQLite's file format 3 (fileformat2.html): page 1's 100-byte header; table
// b-tree pages (0x05 interior: 12-byte header, cells of a 4-byte left child and a varint
// key, the right-most child in the header; 0x0D leaf: 8-byte header, cells of a varint
// payload size, a varint rowid, the payload's local part and, when longer, the 4-byte
// number of its first overflow page); a record: a varint header size, varint serial types,
// then the values one after the other.
#include "reader/sqlite_pages.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace nvtx_reader {
namespace sqlite_pages {

namespace {

constexpr uint8_t kInteriorTable = 0x05;
constexpr uint8_t kLeafTable = 0x0D;

uint32_t U16(const uint8_t* p) { return (uint32_t(p[0]) << 8) | p[1]; }
uint32_t U32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

// A varint at *p (at most 9 bytes, none past end) into *v; false when it runs past end.
inline bool Varint(const uint8_t** p, const uint8_t* end, uint64_t* v) {
  const uint8_t* q = *p;
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) {
    if (q >= end) return false;
    uint8_t b = *q++;
    x = (x << 7) | (b & 0x7F);
    if (!(b & 0x80)) {
      *v = x;
      *p = q;
      return true;
    }
  }
  if (q >= end) return false;
  *v = (x << 8) | *q++;
  *p = q;
  return true;
}

// The size of a value of serial type t; -1 for the reserved types 10 and 11.
inline int64_t ValueSize(uint64_t t) {
  static const int8_t kSmall[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1};
  if (t < 12) return kSmall[t];
  return static_cast<int64_t>((t - 12) / 2);
}

// A big-endian two's-complement integer of n (1..8) bytes.
inline int64_t Integer(const uint8_t* p, int64_t n) {
  uint64_t x = (p[0] & 0x80) ? ~uint64_t(0) : 0;
  for (int64_t i = 0; i < n; ++i) x = (x << 8) | p[i];
  return static_cast<int64_t>(x);
}

bool NonEmpty(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

}  // namespace

File::~File() {
  if (fd_ >= 0) close(fd_);
}

bool File::ReadAt(uint64_t offset, size_t n, uint8_t* dst) const {
  while (n > 0) {
    ssize_t got = pread(fd_, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;  // (an error, or the file ends early: truncated meanwhile?)
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool File::Open(const char* path, std::string* why) {
  fd_ = open(path, O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    *why = "cannot open the file";
    return false;
  }
  struct stat st;
  uint8_t h[100];
  if (fstat(fd_, &st) != 0 || st.st_size < 512 || !ReadAt(0, sizeof(h), h)) {
    *why = "the file is shorter than a page";
    return false;
  }
  size_ = static_cast<uint64_t>(st.st_size);
  uint32_t page_size = U16(h + 16) == 1 ? 65536 : U16(h + 16);
  if (memcmp(h, "SQLite format 3", 16) != 0) {
    *why = "no SQLite header";
  } else if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
    *why = "page size " + std::to_string(page_size);
  } else if (h[18] != 1 || h[19] != 1) {
    *why = "not in rollback-journal mode (WAL?)";
  } else if (page_size - h[20] < 480 || h[21] != 64 || h[22] != 32 || h[23] != 32) {
    *why = "reserved bytes or payload fractions out of range";
  } else if (U32(h + 56) != 1) {
    *why = "text encoding " + std::to_string(U32(h + 56)) + ", not UTF-8";
  } else if (NonEmpty(std::string(path) + "-wal") || NonEmpty(std::string(path) + "-journal")) {
    *why = "a WAL or journal file beside it";
  } else {
    page_size_ = page_size;
    usable_ = page_size - h[20];
    uint64_t in_file = size_ / page_size;
    uint64_t in_header = U32(h + 28);
    // (the header's page count holds when its change counter matches version-valid-for)
    uint64_t pages = (in_header != 0 && U32(h + 24) == U32(h + 92)) ? in_header : in_file;
    if (pages > in_file || pages == 0 || pages > 0xFFFFFFFEull) {
      *why = "the file is shorter than its pages";
      return false;
    }
    pages_ = static_cast<uint32_t>(pages);
    return true;
  }
  return false;
}

const uint8_t* File::Page(uint32_t number, Window* w, std::string* why) const {
  constexpr uint64_t kWindowBytes = uint64_t(1) << 20;
  if (number < w->first || number >= w->first + w->count) {
    // (the pages from this one on, a window's worth: a table's pages mostly come in order)
    uint64_t count = std::max<uint64_t>(1, kWindowBytes / page_size_);
    count = std::min<uint64_t>(count, uint64_t(pages_) - number + 1);
    w->bytes.resize(static_cast<size_t>(count * page_size_));
    if (!ReadAt(uint64_t(number - 1) * page_size_, w->bytes.size(), w->bytes.data())) {
      w->count = 0;
      *why = "a page could not be read (the file changed while read?)";
      return nullptr;
    }
    w->first = number;
    w->count = count;
  }
  return w->bytes.data() + uint64_t(number - w->first) * page_size_;
}

// The payload of `size` bytes whose local part begins at `cell` (on a page ending at
// page_end), contiguous: in place when all local, else assembled in *scratch from the
// overflow pages (each page seen once: `seen`), each read on its own (the window, which
// holds the cell's leaf page, is left alone).
bool File::Payload(const uint8_t* cell, const uint8_t* page_end, uint64_t size, std::vector<uint8_t>* seen,
                   const uint8_t** out, std::string* scratch, std::string* why) const {
  const uint64_t u = usable_;
  const uint64_t max_local = u - 35;
  uint64_t local = size;
  if (size > max_local) {
    uint64_t min_local = ((u - 12) * 32 / 255) - 23;
    uint64_t k = min_local + (size - min_local) % (u - 4);
    local = k <= max_local ? k : min_local;
  }
  if (local > static_cast<uint64_t>(page_end - cell) || (local < size && local + 4 > uint64_t(page_end - cell))) {
    *why = "a cell out of its page";
    return false;
  }
  if (local == size) {
    *out = cell;
    return true;
  }
  if (size > (uint64_t(1) << 31)) {
    *why = "a record over 2 GiB";
    return false;
  }
  // (a size read from the file: more than its overflow pages could hold is damage, found
  // before anything is sized by it; each page is in one chain once)
  if ((size - local + (u - 5)) / (u - 4) > pages_) {
    *why = "a record longer than the file's pages";
    return false;
  }
  scratch->resize(size);
  char* dst = &(*scratch)[0];
  memcpy(dst, cell, local);
  uint64_t done = local;
  uint32_t next = U32(cell + local);
  while (done < size) {
    if (next < 2 || next > pages_ || (*seen)[next]) {
      *why = next == 0 ? "an overflow chain ends early" : "an overflow page out of range or seen twice";
      return false;
    }
    (*seen)[next] = 1;
    uint64_t at = uint64_t(next - 1) * page_size_;
    uint64_t n = std::min<uint64_t>(u - 4, size - done);
    uint8_t link[4];
    if (!ReadAt(at, 4, link) || !ReadAt(at + 4, static_cast<size_t>(n), reinterpret_cast<uint8_t*>(dst + done))) {
      *why = "a page could not be read (the file changed while read?)";
      return false;
    }
    done += n;
    next = U32(link);
  }
  *out = reinterpret_cast<const uint8_t*>(dst);
  return true;
}

bool File::ScanTable(uint32_t root, const Column* columns, int n, RowSink* sink, std::string* why) const {
  if (n < 1 || n > kMaxColumns) {
    *why = "columns asked";
    return false;
  }
  int last = 0;
  for (int j = 0; j < n; ++j) {
    if (columns[j].position < 0 || columns[j].position > 4096) {
      *why = "a column's position";
      return false;
    }
    last = std::max(last, columns[j].position);
  }
  std::vector<uint64_t> type(last + 1), offset(last + 1);
  std::vector<uint8_t> seen(static_cast<size_t>(pages_) + 1, 0);
  Window window;
  // (an interior page is copied: its frame outlives the window's next reads; a leaf page is
  // read from the window, which nothing else reads while its cells are walked)
  std::vector<uint8_t> interior[kMaxDepth + 1];
  std::string scratch;
  Row row;
  bool have_rowid = false;
  struct Frame {
    const uint8_t* page;
    uint32_t header, cells, next;
  };
  Frame stack[kMaxDepth + 1];
  int depth = 0;
  // a page pushed on the walk: in range, seen once, a table b-tree page
  auto push = [&](uint32_t number) {
    if (number < 2 && !(number == 1 && depth == 0)) {
      *why = "a page number out of range";
      return false;
    }
    if (number > pages_ || seen[number]) {
      *why = number > pages_ ? "a page number out of range" : "a page seen twice (a cycle)";
      return false;
    }
    if (depth > kMaxDepth) {
      *why = "a b-tree deeper than " + std::to_string(kMaxDepth);
      return false;
    }
    seen[number] = 1;
    const uint8_t* page = Page(number, &window, why);
    if (!page) return false;
    uint32_t header = number == 1 ? 100 : 0;
    uint8_t kind = page[header];
    if (kind != kInteriorTable && kind != kLeafTable) {
      *why = "not a table b-tree page";
      return false;
    }
    if (kind == kInteriorTable) {
      interior[depth].assign(page, page + page_size_);
      page = interior[depth].data();
    }
    uint32_t cells = U16(page + header + 3);
    if (kind == kInteriorTable && cells == 0) {
      *why = "an interior page without cells";
      return false;
    }
    uint32_t pointers = header + (kind == kInteriorTable ? 12 : 8);
    if (pointers + 2 * cells > usable_) {
      *why = "a page's cells out of bounds";
      return false;
    }
    stack[depth++] = Frame{page, header, cells, 0};
    return true;
  };
  if (!push(root)) return false;
  while (depth > 0) {
    Frame& f = stack[depth - 1];
    const uint8_t* page = f.page;
    const uint8_t* page_end = page + usable_;
    bool interior = page[f.header] == kInteriorTable;
    const uint8_t* pointers = page + f.header + (interior ? 12 : 8);
    if (interior) {
      if (f.next > f.cells) {
        --depth;
        continue;
      }
      uint32_t child;
      if (f.next < f.cells) {
        uint32_t at = U16(pointers + 2 * f.next);
        if (at < f.header + 12 || at + 4 > usable_) {
          *why = "a cell out of its page";
          return false;
        }
        child = U32(page + at);
      } else {
        child = U32(page + f.header + 8);
      }
      f.next++;
      if (!push(child)) return false;
      continue;
    }
    for (uint32_t c = 0; c < f.cells; ++c) {
      uint32_t at = U16(pointers + 2 * c);
      if (at < f.header + 8 || at >= usable_) {
        *why = "a cell out of its page";
        return false;
      }
      const uint8_t* p = page + at;
      uint64_t size, rowid;
      if (!Varint(&p, page_end, &size) || !Varint(&p, page_end, &rowid)) {
        *why = "a cell out of its page";
        return false;
      }
      if (have_rowid && static_cast<int64_t>(rowid) <= row.rowid) {
        *why = "rowids out of order";
        return false;
      }
      have_rowid = true;
      row.rowid = static_cast<int64_t>(rowid);
      const uint8_t* rec;
      if (!Payload(p, page_end, size, &seen, &rec, &scratch, why)) return false;
      const uint8_t* rec_end = rec + size;
      // the record's header: the serial types of the columns up to the last one needed
      const uint8_t* h = rec;
      uint64_t header_size;
      if (!Varint(&h, rec_end, &header_size) || header_size > size || rec + header_size < h) {
        *why = "a record header out of bounds";
        return false;
      }
      const uint8_t* header_end = rec + header_size;
      uint64_t body = header_size;
      int present = 0;
      while (present <= last && h < header_end) {
        uint64_t t;
        if (!Varint(&h, header_end, &t)) {
          *why = "a record header out of bounds";
          return false;
        }
        int64_t bytes = ValueSize(t);
        if (bytes < 0) {
          *why = "a reserved serial type";
          return false;
        }
        if (static_cast<uint64_t>(bytes) > size - body) {  // (body <= size here)
          *why = "a value out of its record";
          return false;
        }
        type[present] = t;
        offset[present] = body;
        body += static_cast<uint64_t>(bytes);
        present++;
      }
      // each column asked: NULL, an integer or text as the caller allows
      for (int j = 0; j < n; ++j) {
        const Column& col = columns[j];
        row.null[j] = true;
        row.integer[j] = 0;
        row.text[j] = nullptr;
        row.text_size[j] = 0;
        if (col.position >= present) {
          if (!col.default_null) {
            *why = "a short record of a column whose default is not NULL";
            return false;
          }
        } else {
          uint64_t t = type[col.position];
          int64_t bytes = ValueSize(t);
          if (offset[col.position] + static_cast<uint64_t>(bytes) > size) {
            *why = "a value out of its record";
            return false;
          }
          const uint8_t* v = rec + offset[col.position];
          if (t == 0) {
            // NULL
          } else if (col.kind == Kind::kInteger && (t <= 6 || t == 8 || t == 9)) {
            row.null[j] = false;
            row.integer[j] = t <= 6 ? Integer(v, bytes) : static_cast<int64_t>(t - 8);
          } else if (col.kind == Kind::kText && t >= 13 && (t & 1)) {
            row.null[j] = false;
            row.text[j] = reinterpret_cast<const char*>(v);
            row.text_size[j] = static_cast<size_t>(bytes);
          } else {
            *why = "a value of serial type " + std::to_string(t) + " in column " + std::to_string(col.position);
            return false;
          }
        }
        if (j == 0 && !sink->Wants(row.null[0], row.integer[0])) break;
        if (j == n - 1 && !sink->Add(row, why)) return false;
      }
    }
    --depth;
  }
  return true;
}

}  // namespace sqlite_pages
}  // namespace nvtx_reader
