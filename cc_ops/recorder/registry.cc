#include "recorder/registry.h"

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "recorder/gate.h"
#include "recorder/string_ids.h"
#include "recorder/string_table.h"

namespace nvtx_recorder {

using namespace nvtx_record;

namespace {

struct DomainInfo {
  std::string name;
  uint64_t create_ns;
  uint64_t destroy_ns;
  int refs;
  bool destroyed;
};

struct RegisteredString {
  uint16_t domain;
  uint32_t id;
  std::string text;
};

// Domain, category and thread names get a new segment id each time they are written
// (string_ids.h): they are defined right where they are used.
struct CategoryInfo {
  uint16_t domain;
  uint32_t category;
  std::string name;
};

struct ThreadNameInfo {
  int64_t tid;
  std::string name;
};

struct Registry {
  std::unordered_map<std::string, uint16_t> domain_ids;
  std::vector<DomainInfo> domains;  // domain id - 1
  std::map<std::pair<uint16_t, std::string>, size_t> string_index;
  std::vector<RegisteredString> strings;
  size_t string_bytes = 0;
  std::map<std::pair<uint16_t, uint32_t>, size_t> category_index;
  std::vector<CategoryInfo> categories;
  std::map<int64_t, size_t> thread_index;
  std::vector<ThreadNameInfo> thread_names;
};

// Heap-allocated and never destroyed: NVTX calls from static destructors stay safe.
Registry& R() {
  static Registry* r = new Registry();
  return *r;
}

// The calling thread's state with its stream made current (segment switch, first
// chunk claim and re-emission of the existing registry happen here, before the caller
// changes the registry). May return null (thread exiting): the caller then only
// updates the registry.
ThreadState* CurrentStreamLocked() {
  ThreadState* ts = GetThreadState();
  if (ts) Reserve(ts, kMaxEventRecordBytes);
  return ts;
}

bool Write16(ThreadState* ts, uint64_t word0, uint64_t second) {
  if (!ts) return false;
  uint8_t* p = Reserve(ts, 16);
  if (!p) return false;
  memcpy(p + 8, &second, 8);
  Commit(ts, p, word0, 16);
  return true;
}

void WriteDomainCreate(ThreadState* ts, uint16_t id, const DomainInfo& d) {
  if (!ts) return;
  const uint32_t sid = AllocSegmentStringIdLocked();
  if (sid && WriteStringDef(ts, sid, 0, d.name.data(), d.name.size())) {
    Write16(ts, MakeWord0(kDomainCreate, 0, id, sid), d.create_ns);
  }
}

void WriteCategory(ThreadState* ts, const CategoryInfo& c) {
  if (!ts) return;
  const uint32_t sid = AllocSegmentStringIdLocked();
  if (sid && WriteStringDef(ts, sid, c.domain, c.name.data(), c.name.size())) {
    Write16(ts, MakeWord0(kCategoryName, 0, c.domain, sid), uint64_t(c.category));
  }
}

}  // namespace

bool WriteThreadNameRecord(ThreadState* ts, int64_t tid, const char* name, size_t len, bool override_name) {
  if (!ts) return false;
  const uint32_t sid = AllocSegmentStringIdLocked();
  if (sid == 0 || !WriteStringDef(ts, sid, 0, name, len)) return false;
  uint8_t flags = override_name ? kFlagThreadNameOverride : 0;
  return Write16(ts, MakeWord0(kThreadName, flags, 0, sid), uint64_t(tid));
}

uint16_t CreateDomain(const char* name, size_t len) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  Registry& r = R();
  ThreadState* ts = CurrentStreamLocked();
  std::string key(name ? name : "", name ? len : 0);
  auto it = r.domain_ids.find(key);
  if (it != r.domain_ids.end()) {
    uint16_t id = it->second;
    DomainInfo& d = r.domains[id - 1];
    if (!d.destroyed) {
      d.refs++;
      return id;
    }
    d.destroyed = false;
    d.refs = 1;
    d.create_ns = NowNs();
    WriteDomainCreate(ts, id, d);
    return id;
  }
  if (r.domains.size() >= kDisabledDomain - 1) return 0;  // kDisabledDomain is never a real id
  DomainInfo d{key, NowNs(), 0, 1, false};
  r.domains.push_back(d);
  uint16_t id = uint16_t(r.domains.size());
  r.domain_ids.emplace(key, id);
  WriteDomainCreate(ts, id, r.domains.back());
  GateNoteDomain(id, key.data(), key.size());
  return id;
}

uint16_t FindDomain(const char* name, size_t len) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  auto it = R().domain_ids.find(std::string(name, len));
  return it == R().domain_ids.end() ? 0 : it->second;
}

void ForEachRegisteredString(const std::function<void(uint16_t, uint32_t, const std::string&)>& fn) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  for (const RegisteredString& s : R().strings) fn(s.domain, s.id, s.text);
}

void DestroyDomain(uint16_t domain) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  Registry& r = R();
  if (domain == 0 || domain > r.domains.size()) return;
  ThreadState* ts = CurrentStreamLocked();
  DomainInfo& d = r.domains[domain - 1];
  if (d.destroyed) return;
  if (--d.refs > 0) return;
  d.destroyed = true;
  d.destroy_ns = NowNs();
  Write16(ts, MakeWord0(kDomainDestroy, 0, domain, 0), d.destroy_ns);
}

uint32_t RegisterString(uint16_t domain, const char* text, size_t len) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  Registry& r = R();
  ThreadState* ts = CurrentStreamLocked();
  std::pair<uint16_t, std::string> key(domain, std::string(text ? text : "", text ? len : 0));
  auto it = r.string_index.find(key);
  if (it != r.string_index.end()) return r.strings[it->second].id;
  uint32_t id = AllocLastingStringId();
  if (id == 0) return 0;  // every lasting id taken: a null handle
  if (ts) WriteStringDef(ts, id, domain, key.second.data(), key.second.size());
  GateNoteRegisteredString(domain, id, key.second.data(), key.second.size());
  if (r.strings.size() < kMaxRegisteredStrings && r.string_bytes + key.second.size() <= kMaxRegisteredBytes) {
    r.string_bytes += key.second.size();
    r.strings.push_back(RegisteredString{domain, id, key.second});
    r.string_index.emplace(std::move(key), r.strings.size() - 1);
  }
  return id;
}

void NameCategory(uint16_t domain, uint32_t category, const char* name, size_t len) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  Registry& r = R();
  ThreadState* ts = CurrentStreamLocked();
  CategoryInfo c{domain, category, std::string(name ? name : "", name ? len : 0)};
  auto key = std::make_pair(domain, category);
  auto it = r.category_index.find(key);
  if (it != r.category_index.end()) {
    r.categories[it->second] = c;
  } else if (r.categories.size() < kMaxNamedCategories) {
    r.categories.push_back(c);
    r.category_index.emplace(key, r.categories.size() - 1);
  }
  WriteCategory(ts, c);
}

void NameOsThread(int64_t tid, const char* name, size_t len) {
  std::lock_guard<std::recursive_mutex> lock(RecorderMutex());
  Registry& r = R();
  ThreadState* ts = CurrentStreamLocked();
  ThreadNameInfo t{tid, std::string(name ? name : "", name ? len : 0)};
  auto it = r.thread_index.find(tid);
  if (it != r.thread_index.end()) {
    r.thread_names[it->second] = t;
  } else if (r.thread_names.size() < kMaxNamedThreads) {
    r.thread_names.push_back(t);
    r.thread_index.emplace(tid, r.thread_names.size() - 1);
  }
  WriteThreadNameRecord(ts, t.tid, t.name.data(), t.name.size(), true);
}

void EmitRegistryLocked(ThreadState* ts) {
  Registry& r = R();
  for (size_t i = 0; i < r.domains.size(); ++i) {
    const DomainInfo& d = r.domains[i];
    uint16_t id = uint16_t(i + 1);
    WriteDomainCreate(ts, id, d);
    if (d.destroyed) Write16(ts, MakeWord0(kDomainDestroy, 0, id, 0), d.destroy_ns);
  }
  for (const RegisteredString& s : r.strings) WriteStringDef(ts, s.id, s.domain, s.text.data(), s.text.size());
  for (const CategoryInfo& c : r.categories) WriteCategory(ts, c);
  for (const ThreadNameInfo& t : r.thread_names) {
    WriteThreadNameRecord(ts, t.tid, t.name.data(), t.name.size(), true);
  }
}

}  // namespace nvtx_recorder
