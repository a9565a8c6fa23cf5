#include "reader/sqlite_api.h"

#include <dlfcn.h>
#include <string.h>

#include <algorithm>
#include <mutex>

namespace nvtx_reader {
namespace sqlite {

void SetError(char* err, uint32_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  size_t n = std::min<size_t>(message.size(), err_len - 1);
  memcpy(err, message.data(), n);
  err[n] = 0;
}

// Loaded into a link-map namespace of its own (dlmopen LM_ID_NEWLM), so that every call
// inside the library stays inside it: TensorFlow's libtensorflow_cc.so.2 exports a SQLite
// of its own (266 sqlite3_* symbols) into the global scope (its Python loader uses
// RTLD_GLOBAL), and a libsqlite3 loaded after it takes TensorFlow's functions for its
// internal calls while we call its own: two SQLite versions on one connection, a crash
// (seen: the SQLite export of a process that had imported TensorFlow, then sqlite3,
// segfaulted in the insert; tests/test_sqlite_native.py). Where dlmopen fails (glibc has
// 16 namespaces), dlopen with RTLD_DEEPBIND (the library's own symbols first). A namespace
// costs a second libc, so the library is loaded once per process and never closed: one
// namespace per process whatever name it is asked by (its soname, its path, a symlink): a
// name is that library when the dynamic loader finds it already loaded in its namespace
// (RTLD_NOLOAD: by name, soname or the file's device and inode); another library is refused.
void* Load(const char* library, Api* api, std::string* err) {
  if (!library) {
    *err = "no library named";
    return nullptr;
  }
  static std::mutex mu;
  static std::string loaded_name;
  static void* loaded = nullptr;
  static Lmid_t loaded_lmid = LM_ID_BASE;
  static Api loaded_api;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded && loaded_name == library) {
    *api = loaded_api;
    return loaded;
  }
  if (loaded) {
    void* same = dlmopen(loaded_lmid, library, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (same) dlclose(same);  // (NOLOAD took a reference: `loaded` keeps its own)
    if (same != loaded) {
      *err = std::string("SQLite library ") + library + " is not " + loaded_name +
             ", which this process loaded (one per process)";
      return nullptr;
    }
    *api = loaded_api;
    return loaded;
  }
  void* handle = dlmopen(LM_ID_NEWLM, library, RTLD_NOW | RTLD_LOCAL);
  if (!handle) handle = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
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
      {"sqlite3_db_filename", reinterpret_cast<void**>(&api->db_filename)},
  };
  for (const Symbol& s : symbols) {
    *s.slot = dlsym(handle, s.name);
    if (!*s.slot) {
      *err = std::string(library) + " has no " + s.name;
      dlclose(handle);
      return nullptr;
    }
  }
  if (dlinfo(handle, RTLD_DI_LMID, &loaded_lmid) != 0) loaded_lmid = LM_ID_BASE;
  loaded_name = library;
  loaded = handle;
  loaded_api = *api;
  return handle;
}

}  // namespace sqlite
}  // namespace nvtx_reader
