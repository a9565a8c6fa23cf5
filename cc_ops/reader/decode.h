// The C API of the decoder of NVTX recordings (see cc_ops/format/record_format.h),
// used from Python through ctypes (nvtx_plugins_tf/recorder/recording/_decoder.py mirrors these
// structs; bump the ABI version with any change here).
//
// One decoder context reads segments one after the other (oldest first); it pairs
// events into ranges and hands them out in batches of fixed-size rows. Strings,
// domains, categories and thread names are kept in global tables of the context (the
// rows hold indexes into them).
//
// Names never depend on the order of the chunks, and state is kept per process (the
// segments of one process, e.g. around an output switch, continue each other: a range
// pushed in one and popped in the next is one range; a forked child resolves inherited
// string ids through its parent). Ranges still open are handed out by nvtxr_finish.
// Memory: the open ranges plus the tables. Every read is bounds-checked: a damaged
// chunk ends at the damage (events before it are kept) and is counted in NvtxrStats.
//
// Layout of the reader:
//   decode.{h,cc}          this C API (no C++ exception crosses it)
//   decoder.{h,cc}         one decode: segments in, rows out (parse / match / apply)
//   tables.{h,cc}          strings, domains, categories, thread names; local ids per process
//   segment_cursor.{h,cc}  the segment being read: file, header checks, chunk order
//   range_matcher.{h,cc}   push/pop stacks, open starts, ends seen before their start
//   record_parse.{h,cc}    the byte layout of one record
//   json_lines.{h,cc}      ABI 9: Trace Event JSON lines of rows (the JSON export's formatter)
//   range_columns.{h,cc}   ABI 10: a recording's ranges as compact columns (analyze's input)
//   rank_stats.{h,cc}      ABI 10: analyze's mapper over them, per process, in one native pass
//   rank_stats_api.cc      ABI 10: its C API (below); ABI 11: an nsys export's rows as input
//   sqlite_ranges.{h,cc}   ABI 11: an SQLite export's range rows read natively into the columns
//   sqlite_pages.{h,cc}    ABI 13: an SQLite table read straight from the file's pages (sqlite_ranges' fast way)
//   step_work.h            ABI 14: each step's inclusive work per name besides the exclusive (compare's);
//                          ABI 15: only when asked (nvtxr_rank_stats' with_incl)
//   rank_stats.{h,cc}      ABI 16: the per-name statistics only when asked (with_name_stats: watch needs none)
//   segment_live.cc        ABI 17: a live read, taken up where the last one stopped (watch's);
//   rank_stats_api.cc      ABI 17: the steps of a window of a live read's ranges (nvtxr_rank_stats_window)
//   sqlite_api.{h,cc}      SQLite through dlopen, for sqlite_insert (the SQLite export) and sqlite_ranges
//   packed_segment.{h,cc}  ABI 12: a packed segment read frame by frame (Zstandard through dlopen)
#ifndef NVTX_PLUGINS_TF_READER_DECODE_H_
#define NVTX_PLUGINS_TF_READER_DECODE_H_

#include <stdint.h>

#define NVTXR_API extern "C" __attribute__((visibility("default")))

enum NvtxrKind : uint8_t { kNvtxrPushPop = 1, kNvtxrStartEnd = 2, kNvtxrMark = 3 };

enum NvtxrRowFlags : uint16_t {
  kNvtxrHasColor = 1 << 0,
  kNvtxrHasCategory = 1 << 1,
  kNvtxrUnclosed = 1 << 2,       // no end was recorded; end_ns = -1
  kNvtxrRegistered = 1 << 3,     // message is a registered string
  kNvtxrUnknownString = 1 << 4,  // message id was never defined (damage)
};

// 80 bytes; numpy dtype in nvtx_plugins_tf/recorder/recording/_decoder.py.
struct NvtxrRow {
  int64_t start_ns;
  int64_t end_ns;  // -1 when unclosed
  int64_t pid;
  int64_t tid;
  int64_t end_tid;    // thread that ended the range (== tid for push/pop and marks)
  uint64_t payload;   // raw 8 bytes (32-bit payloads in the low 4 bytes)
  uint64_t range_id;  // start/end ranges: the recorded id; else 0
  uint32_t message;   // global string index (0 = no message)
  uint32_t domain;    // global domain index (0 = default domain)
  uint32_t category;
  uint32_t color;        // ARGB
  int32_t depth;         // push/pop nesting level in its (thread, domain) stack, 0-based
  uint16_t flags;        // NvtxrRowFlags
  uint8_t kind;          // NvtxrKind
  uint8_t payload_type;  // record_format.h PayloadType
};
static_assert(sizeof(NvtxrRow) == 80, "row is 80 bytes");

struct NvtxrSegmentInfo {
  int64_t pid;
  int64_t ppid;
  uint64_t start_ns;
  uint64_t start_realtime_ns;
  uint32_t chunk_size;
  uint32_t chunk_count;  // chunks present in the file (published or not)
  char process_name[64];
  char cmdline[1024];
  // ABI 4:
  char host_name[256];  // empty: written by an older recorder
  // ABI 5 (zero when the header is older than these fields):
  uint32_t header_size;
  uint32_t reserved;
  uint64_t process_start_ns;         // the start_ns of the process's first segment
  int64_t parent_pid;                // a forked child: its parent's pid ...
  uint64_t parent_process_start_ns;  // ... and process_start_ns
};

struct NvtxrStats {
  uint64_t segments;            // segments opened successfully
  uint64_t damaged_segments;    // damaged header: segment skipped
  uint64_t chunks;              // published chunks read
  uint64_t damaged_chunks;      // chunks that ended at damage (bad record, truncation, bad magic)
  uint64_t unpublished_chunks;  // chunks with a zero magic (skipped, normal)
  uint64_t seq_gaps;            // a thread's chunk numbers skipped or repeated
  uint64_t events;              // event records decoded (push, pop, start, end, mark)
  uint64_t records;             // all records decoded
  uint64_t unmatched_pops;      // pop with an empty stack
  uint64_t unmatched_ends;      // end whose start was never seen
  uint64_t unclosed;            // ranges emitted without end
  uint64_t rows;                // rows emitted
  // ABI 2:
  uint64_t unreadable_segments;  // could not be opened or read at all (permissions, I/O
                                 // error, out of memory): segment skipped (damage)
  uint64_t truncated_segments;   // shorter than the chunks its header says it holds (damage)
  uint64_t missing_chunks;       // chunks missing from truncated segments
  uint64_t dropped_events;       // events the recorder counted as dropped (damage)
  uint64_t unknown_strings;      // events naming a string id defined nowhere (damage)
  // ABI 7:
  uint64_t lost_events_min;  // at least this many events lost in damaged chunks: bytes that
                             // held records and were skipped, / the largest event record
  // ABI 8:
  uint64_t checksum_mismatches;  // sealed chunks whose bytes changed after the seal (also
                                 // counted in damaged_chunks; their records are read)
};

// ABI 12: what of a packed segment does not unpack (nvtxr_open_packed), in the terms of
// packed.py's _unpack_into (Python words it): code, then its two numbers.
enum NvtxrUnpackCode : int64_t {
  kNvtxrUnpackNotPacked = 1,      // not a packed segment (its header): unreadable
  kNvtxrUnpackUnknown = 2,        // a = version, b = codec: unreadable
  kNvtxrUnpackTruncated = 3,      // the file ends before frame a; b = the chunks missing
  kNvtxrUnpackHeader = 4,         // the segment's header does not unpack: unreadable
  kNvtxrUnpackLostFrom = 5,       // frame a and those after it (b in all) do not unpack
  kNvtxrUnpackFrame = 6,          // frame a (chunk a - 1) does not unpack
  kNvtxrUnpackOsError = 7,        // a = errno: unreadable
  kNvtxrUnpackTrailing = 8,       // b bytes follow the last of its a frames (a frame count damaged)
  kNvtxrUnpackUnavailable = 100,  // no Zstandard here (libzstd, libz): unpack it in Python
};
struct NvtxrUnpackDamage {
  int64_t code;
  int64_t a, b;
};

struct NvtxrDomain {
  int64_t pid;
  uint64_t create_ns;  // 0 when no kDomainCreate was seen
  uint32_t local_id;
  int32_t name;  // global string index, -1 when unnamed
};

struct NvtxrCategory {
  uint32_t domain;  // global domain index
  uint32_t category;
  uint32_t name;  // global string index
  uint32_t reserved;
};

struct NvtxrThreadName {
  int64_t pid;
  int64_t tid;
  uint32_t name;       // global string index
  uint32_t override_;  // 1 when set by nvtxNameOsThread
};

NVTXR_API uint32_t nvtxr_abi_version(void);
NVTXR_API void* nvtxr_new(void);
NVTXR_API void nvtxr_free(void* ctx);
// Open a segment file; returns 0 on success, -1 when the file cannot be read (counted in
// unreadable_segments), -2 when its header is damaged (counted in damaged_segments).
// err receives a message naming the file.
NVTXR_API int nvtxr_open_segment(void* ctx, const char* path, char* err, uint32_t err_len);
// ABI 12: open a packed segment (PID-START.nvtxsegz) as the raw segment it holds, unpacked
// frame by frame as it is read (packed_segment.h), up to `cache_bytes` of its frames kept
// unpacked while it is open (the rest unpacked again when read again). Returns as nvtxr_open_segment, and -3
// when it cannot be read as a segment at all, nothing counted (nvtxr_unpack_damage says
// why: for kNvtxrUnpackUnavailable, read it some other way).
NVTXR_API int nvtxr_open_packed(void* ctx, const char* path, uint64_t cache_bytes, char* err, uint32_t err_len);
// ABI 12: what of the packed segment opened last did not unpack (its frames read as zeros):
// up to `capacity` entries into out (NULL: none); returns how many there are.
NVTXR_API int64_t nvtxr_unpack_damage(void* ctx, NvtxrUnpackDamage* out, int64_t capacity);
NVTXR_API int nvtxr_segment_info(void* ctx, NvtxrSegmentInfo* out);
// ABI 3: the header of a segment file without decoding it (no context needed), e.g. to
// place a segment in time or find a process' segments. Lenient: only the segment magic
// and the fields up to start_ns must be present (the others are then zero). 0 on
// success, -1 when the file cannot be read, -2 when it is no segment. chunk_count is 0.
NVTXR_API int nvtxr_peek_segment(const char* path, NvtxrSegmentInfo* out);
// ABI 5: the header of a segment file checked as nvtxr_open_segment checks it, without
// decoding it (no context needed). Returns codes as nvtxr_open_segment (err says why).
// chunk_count is 0.
NVTXR_API int nvtxr_read_segment_header(const char* path, NvtxrSegmentInfo* out, char* err, uint32_t err_len);
// ABI 5: moving a segment onto another clock and process (nvtx-tf merge), in place, so
// that no other code needs the format's layout. buf holds the first len bytes of the
// segment file (at least its header_size). Adds shift_ns to start_ns and process_start_ns
// (unless 0, unknown), and ABI 6: parent_shift_ns to parent_process_start_ns (unless 0),
// a time of the parent's clock, which may have another shift than its child's; sets pid,
// ppid, parent_pid and the NUL-terminated process_name and cmdline (cut to their fields).
// Only the fields inside header_size are written. 0 on success, -2 when buf holds no
// segment header.
NVTXR_API int nvtxr_rewrite_segment_header(uint8_t* buf, uint64_t len, int64_t shift_ns, int64_t parent_shift_ns,
                                           int64_t pid, int64_t ppid, int64_t parent_pid, const char* process_name,
                                           const char* cmdline);
// ABI 5: the same for one chunk of len bytes, in place: adds shift_ns to every timestamp
// (events, domain creation and destruction) and makes the thread old_pid (the main
// thread: the chunk header's tid and kThreadName records) new_pid, walking the records
// as the decoder does. 0 when done; 1 when the chunk was never published (left as it
// is); -2 when it ends at damage (the records before it rewritten, the rest left as it is).
NVTXR_API int nvtxr_rewrite_chunk(uint8_t* buf, uint64_t len, int64_t shift_ns, int64_t old_pid, int64_t new_pid);
// Fill up to capacity rows of the open segment; returns the count; 0 = segment done.
// After nvtxr_finish: the ranges still open in any process (kNvtxrUnclosed).
NVTXR_API int64_t nvtxr_next(void* ctx, NvtxrRow* rows, int64_t capacity);
// No more segments: closes the current one and makes nvtxr_next hand out the ranges
// left open (and count the ends whose start was never seen).
NVTXR_API void nvtxr_finish(void* ctx);
NVTXR_API void nvtxr_close_segment(void* ctx);
// ABI 17: a live read (watch's; segment_cursor.h, SegmentCursor::OpenLive): a raw segment
// opened as nvtxr_open_segment does, to be read again while it is written. Read it to its
// end (nvtxr_ranges_collect until 0), then nvtxr_resume and read what was written since, and
// so on; never nvtxr_finish nor nvtxr_close_segment between reads. nvtxr_resume: 0, or -1
// when the segment cannot be taken up (err says why: damage, another segment in its place;
// read it whole). nvtxr_live_failed: 1 when the last read met damage (its rows are not to
// be kept: read the segment whole).
NVTXR_API int nvtxr_open_live(void* ctx, const char* path, char* err, uint32_t err_len);
NVTXR_API int nvtxr_resume(void* ctx, char* err, uint32_t err_len);
NVTXR_API int nvtxr_live_failed(void* ctx);
NVTXR_API void nvtxr_stats(void* ctx, NvtxrStats* out);
NVTXR_API uint32_t nvtxr_string_count(void* ctx);
NVTXR_API const char* nvtxr_string(void* ctx, uint32_t index, uint32_t* length);
// Copy strings [first, first+count) into buf as consecutive bytes; lengths[i] gets each
// string's length. Returns the number of strings copied (stops when buf is full).
NVTXR_API uint32_t nvtxr_strings(void* ctx, uint32_t first, uint32_t count, char* buf, uint64_t buf_len,
                                 uint32_t* lengths);
NVTXR_API uint32_t nvtxr_domain_count(void* ctx);
NVTXR_API int nvtxr_domain(void* ctx, uint32_t index, NvtxrDomain* out);
NVTXR_API uint32_t nvtxr_category_count(void* ctx);
NVTXR_API int nvtxr_category(void* ctx, uint32_t index, NvtxrCategory* out);
NVTXR_API uint32_t nvtxr_thread_name_count(void* ctx);
NVTXR_API int nvtxr_thread_name(void* ctx, uint32_t index, NvtxrThreadName* out);

// ABI 10: `nvtx-tf analyze`'s mapper (nvtx_plugins_tf/recorder/analysis/mapper.py) in one
// native pass. A ranges object collects a recording's ranges straight from a decoder
// context (nvtxr_ranges_collect, as nvtxr_next: 0 when the segment or the open ranges are
// done; -1 out of memory); bounds:
// out[0] the first start and out[1] the last time over every row decoded, out[2] the rows,
// out[3] the ranges. nvtxr_ranges_name names the collected ranges (key = dom_map[domain] *
// (strings + 1) + message; the name is the key's rank) and returns the number of names,
// nvtxr_ranges_keys copies their keys. nvtxr_rank_stats computes every process's results
// (is_step: n_names flags; the sketch's buckets: see rank_stats.h) and returns how many
// processes (by pid ascending), -1 when out of memory; its columns are emptied. A result's
// fields (NvtxrRankField) are arrays of 8-byte elements (int64; m2 and the quartiles double).
// ABI 15: with_incl 0 leaves kNvtxrRankStepIncl empty (only compare asks for it: analyze
// does not use it, and a worker would ship it with each rank). ABI 16: with_name_stats 0
// leaves the per-name statistics (kNvtxrRankCount to kNvtxrRankSketchCount) empty, not
// computed (watch's reads: only the names, the steps and their work); kNvtxrRankRows, the
// steps and their work are the same either way.
enum NvtxrRankField {
  kNvtxrRankRows = 0,
  kNvtxrRankCount,
  kNvtxrRankSum,
  kNvtxrRankMin,
  kNvtxrRankMax,
  kNvtxrRankM2,
  kNvtxrRankQ1,
  kNvtxrRankMedian,
  kNvtxrRankQ3,
  kNvtxrRankSketchRow,
  kNvtxrRankSketchKey,
  kNvtxrRankSketchCount,
  kNvtxrRankStepRow,
  kNvtxrRankStepStart,
  kNvtxrRankStepEnd,
  kNvtxrRankWorkRows,
  kNvtxrRankStepWork,  // steps x work rows, row-major
  kNvtxrRankStepIncl,  // ABI 14: the same, inclusive of the children's time
};
NVTXR_API void* nvtxr_ranges_new(void);
NVTXR_API void nvtxr_ranges_free(void* ranges);
// empty again for another input, its room kept (the pages it touched are reused)
NVTXR_API void nvtxr_ranges_clear(void* ranges);
// room for n ranges (e.g. a recording's bytes / 32: two 16-byte events a range), so that
// the columns are not copied as they grow
NVTXR_API int nvtxr_ranges_reserve(void* ranges, int64_t n);
NVTXR_API int64_t nvtxr_ranges_collect(void* ranges, void* ctx, int64_t capacity);
NVTXR_API void nvtxr_ranges_bounds(void* ranges, int64_t* out);
NVTXR_API int64_t nvtxr_ranges_name(void* ranges, const int64_t* dom_map, int64_t n_dom, int64_t strings);
NVTXR_API void nvtxr_ranges_keys(void* ranges, int64_t* out);
NVTXR_API int64_t nvtxr_rank_stats(void* ranges, const uint8_t* is_step, int64_t n_names, int with_steps, int with_incl,
                                   int with_name_stats, double log_gamma, const int64_t* bounds, int64_t n_bounds,
                                   int64_t zero_key);
// ABI 17: a live read's window (watch's): nvtxr_ranges_live marks the columns as one, kept
// from read to read (the ranges of each read added by nvtxr_ranges_collect). After
// nvtxr_ranges_name, nvtxr_rank_stats_window computes the results as nvtxr_rank_stats does
// with steps, without the per-name statistics nor step_incl, the longest step at least
// longest_floor; then, for one process, keeps only the ranges that end after the start of
// its last step (and the open ones), and gives the columns their messages back for the next
// read's naming. out: [0] the steps dropped, [1] the longest of them (or longest_floor), [2]
// the latest start of one (INT64_MIN: none), [3] the ranges kept. Returns the processes.
NVTXR_API void nvtxr_ranges_live(void* ranges);
NVTXR_API int64_t nvtxr_rank_stats_window(void* ranges, const uint8_t* is_step, int64_t n_names, int64_t longest_floor,
                                          int64_t* out);
// out: pid, events (its ranges), open ranges
NVTXR_API int nvtxr_rank_stats_header(void* ranges, int64_t process, int64_t* out);
NVTXR_API int64_t nvtxr_rank_stats_size(void* ranges, int64_t process, int field);
NVTXR_API int nvtxr_rank_stats_copy(void* ranges, int64_t process, int field, void* out);
// ABI 11: the rows of an nsys export's NVTX_EVENTS (SQLite or parquetdir), n at a time, as
// columns of 8-byte integers (Arrow's buffers, read in place): start, end (end_valid: Arrow's
// validity bitmap of end from bit end_offset, NULL: none null), eventType, globalTid,
// domainId, and message (the message's index, as the caller numbers the strings). The
// ranges (eventType 59/60 push/pop, 70/71 NVTXT, an end NULL: open) are collected as a
// recording's; their domain is the index of their (domainId, pid) pair, in the order the
// pairs first come; returns the ranges added, -1 out of memory. nvtxr_ranges_pairs writes
// the pairs (domainId, pid; 2 x its result int64, out NULL: none) and returns how many.
NVTXR_API int64_t nvtxr_ranges_add_export(void* ranges, int64_t n, const int64_t* start, const int64_t* end,
                                          const uint8_t* end_valid, int64_t end_offset, const int64_t* event_type,
                                          const int64_t* global_tid, const int64_t* domain_id, const int32_t* message);
NVTXR_API int64_t nvtxr_ranges_pairs(void* ranges, int64_t* out);
// ABI 11: the same from an SQLite export read natively (sqlite_ranges.h): `query` run on the
// file `uri` (a file: URI, read-only) with the SQLite library `library` (dlopen); its columns
// start, end, eventType, globalTid, domainId and the message text, numbered by text as they
// first come (0: NULL, the empty one). The ranges added, -1 (err: why). nvtxr_ranges_messages
// writes their texts (UTF-8 bytes one after the other into out, offsets: count + 1 of them;
// either NULL to size them) and returns how many.
// ABI 13: `kind` (NvtxrSqliteQuery) says what the query is: 0 any query (run as it is); 1 the
// range query of nsys_inputs/batches.py, its message e.text; 2 the same, its message
// coalesce(StringIds.value, e.text) (LEFT JOIN StringIds s ON e.textId = s.id). For 1 and 2
// the rows are read from NVTX_EVENTS' pages when they can be exactly (sqlite_pages.h), else
// by the query: *pages (NULL: not told) 1 when they were read from the pages, else 0 and
// note (note_len bytes, NUL-terminated; NULL: not told) says why not.
enum NvtxrSqliteQuery : int32_t { kNvtxrSqliteAny = 0, kNvtxrSqliteRanges = 1, kNvtxrSqliteRangesStringIds = 2 };
NVTXR_API int64_t nvtxr_ranges_add_sqlite(void* ranges, const char* library, const char* uri, const char* query,
                                          int32_t kind, int32_t* pages, char* note, uint32_t note_len, char* err,
                                          uint32_t err_len);
NVTXR_API int64_t nvtxr_ranges_messages(void* ranges, int64_t* offsets, char* out);
// ABI 13: the domains' creations (eventType 75) that the last nvtxr_ranges_add_sqlite met
// when it read the pages (-1: it did not), in rowid order: 6 int64 a row into values (start,
// start is NULL, rowid, domainId, globalTid (NULL: 0), text is NULL) and their texts as
// nvtxr_ranges_messages writes them (any of the three NULL to size them); how many.
NVTXR_API int64_t nvtxr_ranges_sqlite_creates(void* ranges, int64_t* values, int64_t* offsets, char* out);

#endif  // NVTX_PLUGINS_TF_READER_DECODE_H_
