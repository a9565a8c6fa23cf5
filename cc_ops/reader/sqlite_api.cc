#include "reader/sqlite_api.h"

#include <dlfcn.h>
#include <string.h>

#include <algorithm>

namespace nvtx_reader {
namespace sqlite {

void SetError(char* err, uint32_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  size_t n = std::min<size_t>(message.size(), err_len - 1);
  memcpy(err, message.data(), n);
  err[n] = 0;
}

void* Load(const char* library, Api* api, std::string* err) {
  if (!library) {
    *err = "no library named";
    return nullptr;
  }
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    *err = why ? why : "dlopen failed";
    return nullptr;
  }
  struct Symbol {
    const char* name;
    void** slot;
  } symbols[] = {
      {"sqlite3_open_v2", reinterpret_cast<void**>(&api->open_v2)},
      {"sqlite3_close", reinterpret_cast<void**>(&api->close)},
      {"sqlite3_exec", reinterpret_cast<void**>(&api->exec)},
      {"sqlite3_prepare_v2", reinterpret_cast<void**>(&api->prepare_v2)},
      {"sqlite3_bind_int64", reinterpret_cast<void**>(&api->bind_int64)},
      {"sqlite3_bind_double", reinterpret_cast<void**>(&api->bind_double)},
      {"sqlite3_bind_text", reinterpret_cast<void**>(&api->bind_text)},
      {"sqlite3_bind_null", reinterpret_cast<void**>(&api->bind_null)},
      {"sqlite3_step", reinterpret_cast<void**>(&api->step)},
      {"sqlite3_reset", reinterpret_cast<void**>(&api->reset)},
      {"sqlite3_finalize", reinterpret_cast<void**>(&api->finalize)},
      {"sqlite3_extended_errcode", reinterpret_cast<void**>(&api->extended_errcode)},
      {"sqlite3_errmsg", reinterpret_cast<void**>(&api->errmsg)},
      {"sqlite3_free", reinterpret_cast<void**>(&api->free)},
      {"sqlite3_column_int64", reinterpret_cast<void**>(&api->column_int64)},
      {"sqlite3_column_type", reinterpret_cast<void**>(&api->column_type)},
      {"sqlite3_column_text", reinterpret_cast<void**>(&api->column_text)},
      {"sqlite3_column_bytes", reinterpret_cast<void**>(&api->column_bytes)},
  };
  for (const Symbol& s : symbols) {
    *s.slot = dlsym(handle, s.name);
    if (!*s.slot) {
      *err = std::string(library) + " has no " + s.name;
      dlclose(handle);
      return nullptr;
    }
  }
  return handle;
}

}  // namespace sqlite
}  // namespace nvtx_reader
