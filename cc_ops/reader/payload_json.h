// Extended payloads (NVTX payload extension; format/record_format.h kPayloadSchema and
// the kPayloadExt block of event records) decoded into JSON text, the form nsys'
// NVTX_EVENTS.jsonText holds. Schemas are kept per (process, local domain, schema id).
//
// One payload becomes a JSON object {field name: value} in schema order: integers,
// floats (non-finite ones as strings), strings (inline fixed-length ones up to their
// NUL, pointer strings as the recorder copied them), enums by name, nested schemas as
// objects, fixed-size arrays as lists. Anything the reader cannot decode is kept as
// raw bytes: an unknown schema id gives {"schemaId": N, "size": N, "raw": base64}; a
// field of unknown type gives {"raw": base64} of its bytes; a field the reader cannot
// place (layout unknown, beyond the bytes recorded) is null and the object then also
// holds "_raw": base64 of the whole payload. A payload cut at the recorder's cap has
// "_truncated": true and "_size": its full size. Several payloads on one event
// give a JSON list of such objects. Every read is bounds-checked.
#ifndef NVTX_PLUGINS_TF_READER_PAYLOAD_JSON_H_
#define NVTX_PLUGINS_TF_READER_PAYLOAD_JSON_H_

#include <stdint.h>

#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace nvtx_reader {

class PayloadSchemas {
 public:
  // A kPayloadSchema record's body (damaged bodies are ignored).
  void Define(int proc, uint32_t domain, std::string_view body);
  // JSON text of an event's payload block.
  std::string ToJson(int proc, uint32_t domain, const uint8_t* block, uint64_t len) const;

 private:
  struct Entry {
    uint64_t flags = 0, type = 0, detail = 0, offset = 0, size = 0;
    std::string name;
  };
  struct Schema {
    uint64_t id = 0, type = 0, flags = 0, static_size = 0;
    std::string name;
    std::vector<Entry> entries;  // enum: name, detail = value
  };
  struct Strings;  // the copied pointer strings of one event
  const Schema* Find(int proc, uint32_t domain, uint64_t id) const;
  void Object(int proc, uint32_t domain, const Schema& s, const uint8_t* data, uint64_t len, uint64_t base,
              uint32_t index, const Strings& strings, int depth, std::string* out, bool* lossy) const;
  void Value(int proc, uint32_t domain, const Entry& e, const uint8_t* data, uint64_t len, uint64_t base,
             uint32_t index, const Strings& strings, int depth, std::string* out, bool* lossy) const;

  std::map<std::tuple<int, uint32_t, uint64_t>, Schema> schemas_;
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_PAYLOAD_JSON_H_
