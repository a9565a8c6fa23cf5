// The C API of analyze's native mapper (decode.h, ABI 10, 11, 15, 16 and 17: watch's windows) over range_columns.h and
// rank_stats.h. No C++ exception crosses it.
#include <string.h>

#include <algorithm>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "reader/decode.h"
#include "reader/decoder.h"
#include "reader/range_columns.h"
#include "reader/rank_stats.h"
#include "reader/sqlite_api.h"
#include "reader/sqlite_ranges.h"

namespace {

using nvtx_reader::RangeColumns;
using nvtx_reader::RankStats;

struct Ranges {
  RangeColumns columns;
  std::vector<int64_t> keys;
  std::vector<RankStats> results;
  nvtx_reader::RankStatsWork work;
  nvtx_reader::SqliteMessages messages;
  nvtx_reader::SqliteCreates creates;
};

Ranges* R(void* ranges) { return static_cast<Ranges*>(ranges); }

// The field of a result (NvtxrRankField) and its size in 8-byte elements.
const void* Field(const RankStats& r, int field, int64_t* size) {
  auto of = [size](const auto& v) -> const void* {
    *size = static_cast<int64_t>(v.size());
    return v.data();
  };
  switch (field) {
    case kNvtxrRankRows:
      return of(r.rows);
    case kNvtxrRankCount:
      return of(r.count);
    case kNvtxrRankSum:
      return of(r.sum);
    case kNvtxrRankMin:
      return of(r.min);
    case kNvtxrRankMax:
      return of(r.max);
    case kNvtxrRankM2:
      return of(r.m2);
    case kNvtxrRankQ1:
      return of(r.q1);
    case kNvtxrRankMedian:
      return of(r.median);
    case kNvtxrRankQ3:
      return of(r.q3);
    case kNvtxrRankSketchRow:
      return of(r.sketch_row);
    case kNvtxrRankSketchKey:
      return of(r.sketch_key);
    case kNvtxrRankSketchCount:
      return of(r.sketch_count);
    case kNvtxrRankStepRow:
      return of(r.step_row);
    case kNvtxrRankStepStart:
      return of(r.step_start);
    case kNvtxrRankStepEnd:
      return of(r.step_end);
    case kNvtxrRankWorkRows:
      return of(r.work_rows);
    case kNvtxrRankStepWork:
      return of(r.step_work);
    case kNvtxrRankStepIncl:
      return of(r.step_incl);
    default:
      *size = -1;
      return nullptr;
  }
}

}  // namespace

NVTXR_API void* nvtxr_ranges_new(void) { return new (std::nothrow) Ranges(); }

NVTXR_API void nvtxr_ranges_free(void* ranges) { delete R(ranges); }

NVTXR_API void nvtxr_ranges_clear(void* ranges) {
  if (!ranges) return;
  Ranges* r = R(ranges);
  r->columns.Clear();
  r->keys.clear();
  r->results.clear();
  r->creates = nvtx_reader::SqliteCreates();
}

NVTXR_API int nvtxr_ranges_reserve(void* ranges, int64_t n) {
  if (!ranges || n < 0) return -1;
  try {
    R(ranges)->columns.Reserve(static_cast<size_t>(n));
    return 0;
  } catch (...) {
    return -1;
  }
}

NVTXR_API int64_t nvtxr_ranges_collect(void* ranges, void* ctx, int64_t capacity) {
  if (!ranges || !ctx) return -1;
  try {
    return R(ranges)->columns.Collect(static_cast<nvtx_reader::Decoder*>(ctx), capacity);
  } catch (...) {
    return -1;
  }
}

NVTXR_API void nvtxr_ranges_bounds(void* ranges, int64_t* out) {
  if (!ranges || !out) return;
  const RangeColumns& c = R(ranges)->columns;
  out[0] = c.lowest;
  out[1] = c.highest;
  out[2] = c.rows;
  out[3] = static_cast<int64_t>(c.size());
}

NVTXR_API int64_t nvtxr_ranges_name(void* ranges, const int64_t* dom_map, int64_t n_dom, int64_t strings) {
  if (!ranges) return -1;
  try {
    Ranges* r = R(ranges);
    r->columns.Name(dom_map, n_dom, strings, &r->keys);
    return static_cast<int64_t>(r->keys.size());
  } catch (...) {
    return -1;
  }
}

NVTXR_API void nvtxr_ranges_keys(void* ranges, int64_t* out) {
  if (ranges && out) memcpy(out, R(ranges)->keys.data(), R(ranges)->keys.size() * sizeof(int64_t));
}

NVTXR_API int64_t nvtxr_rank_stats(void* ranges, const uint8_t* is_step, int64_t n_names, int with_steps, int with_incl,
                                   int with_name_stats, double log_gamma, const int64_t* bounds, int64_t n_bounds,
                                   int64_t zero_key) {
  if (!ranges || !bounds || n_bounds < 1) return -1;
  try {
    Ranges* r = R(ranges);
    nvtx_reader::SketchBuckets buckets{log_gamma, bounds, n_bounds, zero_key, static_cast<float>(1.0 / log_gamma)};
    r->results = nvtx_reader::ComputeRankStats(r->columns, is_step, n_names, with_steps != 0, with_incl != 0,
                                               with_name_stats != 0, buckets, &r->work);
    r->columns.Clear();  // (the results are what is left; the room stays for the next input)
    return static_cast<int64_t>(r->results.size());
  } catch (...) {
    return -1;
  }
}

NVTXR_API void nvtxr_ranges_live(void* ranges) {
  if (ranges) R(ranges)->columns.window = true;
}

NVTXR_API int64_t nvtxr_rank_stats_window(void* ranges, const uint8_t* is_step, int64_t n_names, int64_t longest_floor,
                                          int64_t* out) {
  if (!ranges || !is_step || !out) return -1;
  try {
    Ranges* r = R(ranges);
    RangeColumns& c = r->columns;
    const int64_t one = 1;
    const nvtx_reader::SketchBuckets none{1.0, &one, 1, 0, 1.0f};  // (no per-name statistics: unused)
    r->results = nvtx_reader::ComputeRankStats(c, is_step, n_names, /*with_steps=*/true, /*with_incl=*/false,
                                               /*with_name_stats=*/false, none, &r->work, longest_floor);
    out[0] = 0;
    out[1] = longest_floor;
    out[2] = std::numeric_limits<int64_t>::min();
    if (r->results.size() == 1 && !r->results[0].step_start.empty() && c.named_strings >= 0) {
      // what a later step may need: the ranges that end after the start of the last step
      // (steps come in start order: a later one starts at or after it), and the open ones
      const int64_t floor = r->results[0].step_start.back();
      c.KeepIf([&](size_t i) {
        if ((c.flags[i] & RangeColumns::kOpen) || c.end[i] > floor) return true;
        if (is_step[c.name()[i]]) {
          out[0]++;
          out[1] = std::max(out[1], c.end[i] - c.start[i]);
          out[2] = std::max(out[2], c.start[i]);
        }
        return false;
      });
    }
    if (c.named_strings >= 0) c.Unname(r->keys);
    out[3] = static_cast<int64_t>(c.size());
    return static_cast<int64_t>(r->results.size());
  } catch (...) {
    return -1;
  }
}

NVTXR_API int nvtxr_rank_stats_header(void* ranges, int64_t process, int64_t* out) {
  if (!ranges || process < 0 || process >= static_cast<int64_t>(R(ranges)->results.size())) return -1;
  const RankStats& r = R(ranges)->results[process];
  out[0] = r.pid;
  out[1] = r.events;
  out[2] = r.open_ranges;
  return 0;
}

NVTXR_API int64_t nvtxr_rank_stats_size(void* ranges, int64_t process, int field) {
  if (!ranges || process < 0 || process >= static_cast<int64_t>(R(ranges)->results.size())) return -1;
  int64_t size = -1;
  Field(R(ranges)->results[process], field, &size);
  return size;
}

NVTXR_API int nvtxr_rank_stats_copy(void* ranges, int64_t process, int field, void* out) {
  if (!ranges || process < 0 || process >= static_cast<int64_t>(R(ranges)->results.size())) return -1;
  int64_t size = -1;
  const void* data = Field(R(ranges)->results[process], field, &size);
  if (size < 0) return -1;
  if (size) memcpy(out, data, static_cast<size_t>(size) * 8);
  return 0;
}

NVTXR_API int64_t nvtxr_ranges_add_export(void* ranges, int64_t n, const int64_t* start, const int64_t* end,
                                          const uint8_t* end_valid, int64_t end_offset, const int64_t* event_type,
                                          const int64_t* global_tid, const int64_t* domain_id, const int32_t* message) {
  if (!ranges || n < 0 || (n > 0 && (!start || !end || !event_type || !global_tid || !domain_id || !message))) {
    return -1;
  }
  try {
    return R(ranges)->columns.AddExportRows(n, start, end, end_valid, end_offset, event_type, global_tid, domain_id,
                                            message);
  } catch (...) {
    return -1;
  }
}

NVTXR_API int64_t nvtxr_ranges_pairs(void* ranges, int64_t* out) {
  if (!ranges) return -1;
  const std::vector<int64_t>& pairs = R(ranges)->columns.pairs;
  if (out && !pairs.empty()) memcpy(out, pairs.data(), pairs.size() * sizeof(int64_t));
  return static_cast<int64_t>(pairs.size() / 2);
}

NVTXR_API int64_t nvtxr_ranges_add_sqlite(void* ranges, const char* library, const char* uri, const char* query,
                                          int32_t kind, int32_t* pages, char* note, uint32_t note_len, char* err,
                                          uint32_t err_len) {
  if (pages) *pages = 0;
  if (!ranges || !uri || !query || kind < 0 || kind > 2) return -1;
  std::string why, why_not;
  bool used = false;
  int64_t n;
  try {
    n = nvtx_reader::ReadSqliteRanges(library, uri, query, static_cast<NvtxrSqliteQuery>(kind), &R(ranges)->columns,
                                      &R(ranges)->messages, &R(ranges)->creates, &used, &why_not, &why);
  } catch (...) {
    n = -1;
    why = "out of memory";
  }
  if (pages) *pages = used ? 1 : 0;
  nvtx_reader::sqlite::SetError(note, note_len, why_not);
  if (n < 0) nvtx_reader::sqlite::SetError(err, err_len, why);
  return n;
}

NVTXR_API int64_t nvtxr_ranges_messages(void* ranges, int64_t* offsets, char* out) {
  if (!ranges) return -1;
  const std::vector<std::string>& values = R(ranges)->messages.values;
  int64_t at = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (offsets) offsets[i] = at;
    if (out) memcpy(out + at, values[i].data(), values[i].size());
    at += static_cast<int64_t>(values[i].size());
  }
  if (offsets) offsets[values.size()] = at;
  return static_cast<int64_t>(values.size());
}

NVTXR_API int64_t nvtxr_ranges_sqlite_creates(void* ranges, int64_t* values, int64_t* offsets, char* out) {
  if (!ranges) return -1;
  const nvtx_reader::SqliteCreates& creates = R(ranges)->creates;
  if (!creates.gathered) return -1;
  if (values && !creates.values.empty()) memcpy(values, creates.values.data(), creates.values.size() * sizeof(int64_t));
  int64_t at = 0;
  for (size_t i = 0; i < creates.text.size(); ++i) {
    if (offsets) offsets[i] = at;
    if (out) memcpy(out + at, creates.text[i].data(), creates.text[i].size());
    at += static_cast<int64_t>(creates.text[i].size());
  }
  if (offsets) offsets[creates.text.size()] = at;
  return static_cast<int64_t>(creates.text.size());
}
