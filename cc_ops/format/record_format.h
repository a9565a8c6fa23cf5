// On-disk format of an NVTX recording: the one contract between the recorder
// (cc_ops/recorder, the writer, loaded into a profiled process through
// NVTX_INJECTION64_PATH) and the reader (cc_ops/reader; nvtx_plugins_tf.recorder reads
// through it). Both include this file from its neutral home, cc_ops/format/; nothing in
// it belongs to either side.
//
// A recording is a directory (NVTX_TF_RECORD_DIR). Every process that makes an NVTX
// call while the recorder is attached writes one segment file into it:
//     <pid>-<start_ns>.nvtxseg
// (a forked child opens its own segment on its first event; the parent's file is
// never touched by the child).
//
// Segment file layout (all integers little-endian, x86_64):
//     [SegmentHeader: kSegmentHeaderSize bytes]
//     [chunk 0: chunk_size bytes][chunk 1] ...
// Chunk k starts at kSegmentHeaderSize + k * chunk_size. Each chunk belongs to exactly
// one thread of the process and holds a run of that thread's records in program order.
// A thread's chunks are numbered by ChunkHeader.seq (0, 1, 2, ...).
// Files are created 0600 (they hold command lines), recording directories 0700.
//
// Crash safety: the file is written through MAP_SHARED mappings. Every write lands in
// the page cache at once, so a SIGKILL loses nothing already written. The writer
// stores the first word of a record (kind != 0) last, with release order; the first
// zero word in an unsealed chunk ends that chunk's data when only zeros follow it, or when
// what follows it, up to its last non-zero byte, fits in the body of the one record that
// starts there (the record the writer was killed in, or is still writing), judged by the
// record kinds and their real sizes: at most 40 bytes (an event without a payload block, a
// 16-byte definition), a kStringDef (u32 length, then text without NUL), a kPayloadSchema
// (u32 length, then a PayloadSchemaDef whose entries end there), an event with an extended
// payload (its block's entries ending at the block's length) -- anything else after a zero
// word is damage, and so is a zero word in a sealed chunk. A chunk whose magic is not kChunkMagic
// was never published and is skipped. Unknown record kinds end the chunk (damage).
//
// Every record starts with one 8-byte word and is a multiple of 8 bytes long:
//     byte 0      kind   (RecordKind, never 0)
// and, in full form (every kind but the compact events below), goes on:
//     byte 1      flags  (RecordFlags)
//     bytes 2-3   domain (process-local domain id; 0 = NVTX default domain)
//     bytes 4-7   msg    (process-local string id; 0 = no message)
// followed by, in this order, only the fields its kind and flags call for:
//     u64 timestamp_ns   all event kinds and kDomainCreate/kDomainDestroy
//                        (CLOCK_MONOTONIC, nanoseconds)
//     u64 range_id       kRangeStart, kRangeEnd (nonzero)
//     u32 color, u32 category      if flags & (kFlagColor | kFlagCategory)
//     u64 payload        if (flags & kPayloadMask) != 0; 32-bit payloads sit in the low
//                        4 bytes (float/int32/uint32 bit patterns)
// Compact events (format 2): the common event in one word (8 bytes; start and end add
// their u64 range_id, 16 bytes), its timestamp as a delta from the chunk's clock:
//     bits 0-7    kind    kCompactPush .. kCompactMark (= the full kind + kCompactKindOffset)
//     bits 8-13   domain  (< kCompactDomainLimit)
//     bits 14-31  msg     (< kCompactMsgLimit; 0 = no message; pop and end: 0)
//     bits 32-63  delta   ns after the chunk's clock
// The chunk's clock is the timestamp of the previous event record (full or compact) of
// the same chunk; a compact event's timestamp is that + delta and becomes the clock. There
// is none before a chunk's first event record, so that is always in full form: each chunk
// is decoded on its own, and damage inside one never shifts the times of another.
// Definition records do not move the clock. The writer uses the compact form when the
// event has no flags (no color, category, payload, registered message), its ids fit and
// its delta is below kCompactDeltaLimit (4.29 s); otherwise the full form. The word is
// stored with one release store, as any first word: crash safety is unchanged. A reader
// that lost the clock (damage skipped inside the chunk, or a compact event with no full
// one before it, which no writer writes) cannot date the compact events that follow
// until the next full event record: they are lost (damage), and a reader resumes after
// damage at a full-form record only. So that damage costs little more than the bytes it
// hit, the writer writes the first event record starting in each kClockSyncBytes block
// of the chunk (offsets from the chunk's start) in full form (0.2 % more bytes).
// Definition records:
//     kStringDef:     word0(msg = the new string id, domain = domain it was registered in
//                     or 0), u32 byte_length, u32 0, then byte_length UTF-8 bytes padded
//                     with zeros to a multiple of 8. An interned (ASCII/Unicode) message
//                     is defined in a thread's stream before that thread's first record
//                     using it. A registered string (kFlagRegisteredMessage) and a domain
//                     are defined once, in the stream of the thread that registered or
//                     created it (re-emitted into a new segment of the process while the
//                     recorder's bounded registry still holds it): readers must collect
//                     the definitions of the whole segment (and of the earlier segments
//                     of the process, and for inherited ids of the parent) before naming
//                     events. Ids are unique within a process and never reused; one
//                     text may have several ids.
//     kDomainCreate:  word0(domain = new id, msg = id of its name string), u64 timestamp
//     kDomainDestroy: word0(domain), u64 timestamp
//     kCategoryName:  word0(domain, msg = name string id), u32 category, u32 0
//     kThreadName:    word0(msg = name string id, flags = kFlagThreadNameOverride when set
//                     by nvtxNameOsThread), i64 tid
//     kPayloadSchema: word0(domain = domain it was registered in), u32 byte_length, u32 0,
//                     then byte_length bytes (padded to 8) of a PayloadSchemaDef (below),
//                     in the stream of the thread that called nvtxPayloadSchemaRegister or
//                     nvtxPayloadEnumRegister (format 1, added with the payload extension;
//                     collected, like kStringDef, for the whole segment before events).
// Extended payloads (NVTX payload extension, NVTX_PAYLOAD_TYPE_EXT): an event record whose
// payload type is kPayloadExt holds in its u64 payload the byte length L of the payload
// block that follows the record's fixed fields (L padded to 8 is part of the record). The
// block is a run of PayloadEntryHeader + stored bytes (padded to 8): kPayloadEntryData
// (the bytes of one nvtxPayloadData_t, at most kMaxExtPayloadBytes per event in all) and
// kPayloadEntryString (the C string a pointer field of a schema points to, copied at the
// call, at most kMaxPayloadStringBytes each).
#ifndef NVTX_PLUGINS_TF_FORMAT_RECORD_FORMAT_H_
#define NVTX_PLUGINS_TF_FORMAT_RECORD_FORMAT_H_

#include <stddef.h>
#include <stdint.h>

namespace nvtx_record {

constexpr char kSegmentMagic[8] = {'N', 'V', 'T', 'X', 'R', 'E', 'C', '1'};
// 2: compact events (kCompactPush .. kCompactMark). Readers read every version from
// kOldestFormatVersion on (a version-1 segment simply holds no compact events).
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kOldestFormatVersion = 1;
constexpr uint32_t kSegmentHeaderSize = 4096;
constexpr uint32_t kDefaultChunkSize = 256 * 1024;  // NVTX_TF_CHUNK_SIZE overrides
constexpr uint32_t kChunkMagic = 0x4B4E4843;        // "CHNK"
constexpr const char* kSegmentSuffix = ".nvtxseg";
// SegmentHeader::flags. Liveness without pids (a writer in another PID namespace or on another
// host is not in this /proc): the writer holds an OFD read lock on its segment file for as
// long as it writes it (kSegmentLocked: the lock was taken; released when the segment is
// closed or the process ends, however), and sets kSegmentClosed when it is done with it (a new
// segment, the process's exit; not a SIGKILL or a crash). docs/guarantees.md, "Live segments".
constexpr uint32_t kSegmentLocked = 1;
constexpr uint32_t kSegmentClosed = 2;

struct SegmentHeader {
  char magic[8];         // kSegmentMagic
  uint32_t version;      // kFormatVersion
  uint32_t header_size;  // kSegmentHeaderSize
  uint32_t chunk_size;   // bytes per chunk, a multiple of 4096
  uint32_t flags;        // kSegmentLocked | kSegmentClosed (0 from older writers: unknown)
  int64_t pid;
  int64_t ppid;
  uint64_t start_ns;           // CLOCK_MONOTONIC when the segment was opened
  uint64_t start_realtime_ns;  // CLOCK_REALTIME at the same moment
  char process_name[64];       // /proc/self/comm, NUL-terminated
  char cmdline[1024];          // argv joined by spaces, NUL-terminated, truncated
  // Kept current by the writer through a shared mapping of the header page while the
  // segment is in use (zero in segments of older writers: unknown).
  uint64_t chunk_count;     // chunks the file was extended to hold: a file shorter than
                            // header_size + chunk_count * chunk_size was truncated
  uint64_t dropped_events;  // events the writer could not record (disk full, file size
                            // limit, NVTX call from a signal handler or after the
                            // thread's teardown, ...): damage
  // Identity of the process, shared by all its segments (an output switch opens another
  // segment of the same process): the start_ns of its first segment. Readers continue
  // ranges, string ids and domain ids from one segment of a process to the next.
  uint64_t process_start_ns;
  // A forked child: its parent's pid and process_start_ns (0 if the parent had no
  // segment). String ids below inherited_string_ids were allocated by the parent before
  // the fork; one not defined in the child's segments is the parent's.
  int64_t parent_pid;
  uint64_t parent_process_start_ns;
  uint32_t inherited_string_ids;
  uint32_t reserved1;
  // The machine's name (gethostname), NUL-terminated; zero from older writers: unknown.
  // `nvtx-tf merge` labels each recording with it.
  char host_name[256];
  // rest of the kSegmentHeaderSize bytes: zero
};

struct ChunkHeader {       // 64 bytes at the start of every chunk
  uint32_t magic;          // kChunkMagic, stored last (release) when the chunk is claimed
  uint32_t thread_index;   // process-local index of the thread (0, 1, 2, ... by first use)
  int64_t tid;             // OS thread id (gettid)
  uint64_t seq;            // this thread's chunk number, 0-based
  uint64_t thread_serial;  // 1 + process-wide serial of the thread, the same in every
                           // segment of the process (0 from older writers)
  // The seal, written by the owning thread when it leaves the chunk for good (a new chunk,
  // an output switch, the thread's exit): sum1 and sum2 first, then sealed_end (release).
  // sealed_end = the offset in the chunk where its records end; 0 = not sealed (the
  // chunk in use when the process ended or was killed, a forked child's inherited chunk,
  // older writers): read as before, without the check. A reader reads a sealed chunk's
  // records up to sealed_end only, and a chunk whose words no longer give the sums is
  // damaged (bits changed on disk or in transit).
  uint64_t sealed_end;
  uint64_t sum1;
  uint64_t sum2;
  uint64_t reserved;
};
constexpr uint32_t kChunkHeaderSize = sizeof(ChunkHeader);
static_assert(kChunkHeaderSize == 64, "chunk header");

// The seal's sums over the 8-byte words of chunk[kChunkHeaderSize, end): Fletcher's
// scheme on 64-bit words (sum1 += word; sum2 += sum1; both mod 2^64, sum1 starting at
// `end`). Any change of one word changes sum1; a reordering of words changes sum2. About
// one cycle per word: 0.05 ns per byte recorded, paid once per chunk.
inline void ChunkSums(const uint8_t* chunk, uint64_t end, uint64_t* sum1, uint64_t* sum2) {
  uint64_t a = end, b = 0;
  for (uint64_t off = kChunkHeaderSize; off + 8 <= end; off += 8) {
    uint64_t w;
    __builtin_memcpy(&w, chunk + off, 8);
    a += w;
    b += a;
  }
  *sum1 = a;
  *sum2 = b;
}

enum RecordKind : uint8_t {
  kEnd = 0,  // a zero word: no more records in this chunk
  kRangePush = 1,
  kRangePop = 2,
  kRangeStart = 3,
  kRangeEnd = 4,
  kMark = 5,
  kCompactPush = 9,  // format 2: compact events, one word (+ range_id), see above
  kCompactPop = 10,
  kCompactStart = 11,
  kCompactEnd = 12,
  kCompactMark = 13,
  kStringDef = 16,
  kDomainCreate = 17,
  kDomainDestroy = 18,
  kCategoryName = 19,
  kThreadName = 20,
  kPayloadSchema = 21,
};

constexpr uint8_t kCompactKindOffset = kCompactPush - kRangePush;  // compact kind - full kind
inline bool IsFullEventKind(uint8_t kind) { return kind >= kRangePush && kind <= kMark; }
inline bool IsCompactEventKind(uint8_t kind) { return kind >= kCompactPush && kind <= kCompactMark; }

// The compact event word's fields (see above).
constexpr int kCompactDomainShift = 8;
constexpr int kCompactMsgShift = 14;
constexpr int kCompactDeltaShift = 32;
constexpr uint32_t kCompactDomainLimit = 1u << (kCompactMsgShift - kCompactDomainShift);  // 64
constexpr uint32_t kCompactMsgLimit = 1u << (kCompactDeltaShift - kCompactMsgShift);      // 262144
constexpr uint64_t kCompactDeltaLimit = uint64_t(1) << 32;                                // 4.29 s
constexpr uint32_t kClockSyncBytes = 4096;  // the writer's full events: at least one per block
// The word of a compact event of full kind `kind` (push .. mark); the fields must fit.
inline uint64_t CompactWord(uint8_t kind, uint32_t domain, uint32_t msg, uint64_t delta) {
  return uint64_t(uint8_t(kind + kCompactKindOffset)) | (uint64_t(domain) << kCompactDomainShift) |
         (uint64_t(msg) << kCompactMsgShift) | (delta << kCompactDeltaShift);
}
inline uint32_t CompactDomain(uint64_t w) { return uint32_t(w >> kCompactDomainShift) & (kCompactDomainLimit - 1); }
inline uint32_t CompactMsg(uint64_t w) { return uint32_t(w >> kCompactMsgShift) & (kCompactMsgLimit - 1); }
inline uint64_t CompactDelta(uint64_t w) { return w >> kCompactDeltaShift; }

enum RecordFlags : uint8_t {
  kFlagColor = 1 << 0,
  kFlagCategory = 1 << 1,
  kFlagRegisteredMessage = 1 << 2,   // message came from nvtxDomainRegisterString
  kFlagThreadNameOverride = 1 << 3,  // kThreadName from nvtxNameOsThread
  kPayloadShift = 4,
  kPayloadMask = 0xF0,  // (flags & kPayloadMask) >> kPayloadShift is a PayloadType
};

enum PayloadType : uint8_t {
  kPayloadNone = 0,
  kPayloadU64 = 1,
  kPayloadI64 = 2,
  kPayloadDouble = 3,
  kPayloadU32 = 4,
  kPayloadI32 = 5,
  kPayloadFloat = 6,
  kPayloadExt = 7,  // extended payloads (the block described above)
};

// ---- payload extension ----
constexpr uint32_t kMaxExtPayloadBytes = 4096;    // payload block of one event, headers included
constexpr uint32_t kMaxPayloadStringBytes = 256;  // one copied C string
constexpr uint32_t kMaxPayloadsPerEvent = 16;     // nvtxPayloadData_t entries kept per event

enum PayloadEntryKind : uint16_t { kPayloadEntryData = 1, kPayloadEntryString = 2 };

struct PayloadEntryHeader {  // 24 bytes, followed by `stored` bytes padded to 8
  uint64_t key;              // kPayloadEntryData: schema id; kPayloadEntryString: byte offset,
                             // within payload `index`, of the pointer field
  uint64_t size;             // data: nvtxPayloadData_t::size; string: its length, or
                             // UINT64_MAX when no terminator was found within what was read
  uint32_t stored;           // bytes that follow (less than size: truncated)
  uint16_t kind;             // PayloadEntryKind
  uint16_t index;            // payload index in the event's nvtxPayloadData_t array
};
static_assert(sizeof(PayloadEntryHeader) == 24, "payload entry header is 24 bytes");

// kPayloadSchema body. The writer computes the layout (offsets and sizes as x86_64 C
// would lay the struct out, packAlign honored) so readers need no alignment rules.
struct PayloadSchemaDef {  // 48 bytes, then name_len bytes of name padded to 8, then entries
  uint64_t schema_id;
  uint64_t schema_type;  // NVTX_PAYLOAD_SCHEMA_TYPE_*; kPayloadDefEnum for an enum
  uint64_t flags;        // schema flags; for an enum: sizeOfEnum
  uint64_t static_size;  // bytes of the payload (computed when not given; 0 = unknown)
  uint32_t num_entries;
  uint32_t name_len;
  uint64_t reserved;
};
constexpr uint64_t kPayloadDefEnum = 0xE;
// One schema entry: 48 bytes then name_len bytes of name padded to 8. For an enum value:
// flags = isFlag, type = 0, detail = the value, offset = 0, size = 0.
struct PayloadSchemaEntryDef {
  uint64_t flags;   // NVTX_PAYLOAD_ENTRY_FLAG_*
  uint64_t type;    // NVTX_PAYLOAD_ENTRY_TYPE_*, or a schema or enum id
  uint64_t detail;  // arrayOrUnionDetail
  uint64_t offset;  // byte offset in the payload; UINT64_MAX = unknown (layout not computable)
  uint64_t size;    // bytes of the whole entry (all array elements); 0 = unknown
  uint32_t name_len;
  uint32_t reserved;
};
static_assert(sizeof(PayloadSchemaDef) == 48 && sizeof(PayloadSchemaEntryDef) == 48, "schema defs");

// The layout is fixed: readers in other languages (tests/native/segment_oracle.py,
// nvtx_plugins_tf/recorder/recording/_synth.py) transcribe these offsets, and the C++ reader reads
// the headers straight into these structs. A change here is a format change.
static_assert(sizeof(ChunkHeader) == 64, "chunk header is 64 bytes");
static_assert(offsetof(ChunkHeader, thread_index) == 4, "chunk header layout");
static_assert(offsetof(ChunkHeader, tid) == 8, "chunk header layout");
static_assert(offsetof(ChunkHeader, seq) == 16, "chunk header layout");
static_assert(offsetof(ChunkHeader, thread_serial) == 24, "chunk header layout");
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderSize, "segment header fits");
static_assert(offsetof(SegmentHeader, version) == 8, "header layout");
static_assert(offsetof(SegmentHeader, header_size) == 12, "header layout");
static_assert(offsetof(SegmentHeader, chunk_size) == 16, "header layout");
static_assert(offsetof(SegmentHeader, pid) == 24, "header layout");
static_assert(offsetof(SegmentHeader, ppid) == 32, "header layout");
static_assert(offsetof(SegmentHeader, start_ns) == 40, "header layout");
static_assert(offsetof(SegmentHeader, start_realtime_ns) == 48, "header layout");
static_assert(offsetof(SegmentHeader, process_name) == 56, "header layout");
static_assert(offsetof(SegmentHeader, cmdline) == 120, "header layout");
static_assert(offsetof(SegmentHeader, chunk_count) == 1144, "header layout");
static_assert(offsetof(SegmentHeader, dropped_events) == 1152, "header layout");
static_assert(offsetof(SegmentHeader, process_start_ns) == 1160, "header layout");
static_assert(offsetof(SegmentHeader, parent_pid) == 1168, "header layout");
static_assert(offsetof(SegmentHeader, parent_process_start_ns) == 1176, "header layout");
static_assert(offsetof(SegmentHeader, inherited_string_ids) == 1184, "header layout");
static_assert(offsetof(SegmentHeader, host_name) == 1192, "header layout");
static_assert(sizeof(SegmentHeader) == 1448, "header layout");

// Segment headers of the first writers end after cmdline; chunk_count and the fields
// after it are read only from headers at least sizeof(SegmentHeader) long.
constexpr uint32_t kHeaderV1End = offsetof(SegmentHeader, chunk_count);

}  // namespace nvtx_record

#endif  // NVTX_PLUGINS_TF_FORMAT_RECORD_FORMAT_H_
