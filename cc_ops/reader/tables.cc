#include "reader/tables.h"

#include <algorithm>

namespace nvtx_reader {

namespace {
// Local string ids within this distance of a process' first one go into a vector.
constexpr uint32_t kDenseStringIds = 1u << 20;
}  // namespace

Tables::Tables() {
  Intern(std::string_view());
  domains_.push_back(NvtxrDomain{0, 0, 0, -1});
}

int Tables::Process(int64_t pid, uint64_t identity, int64_t parent_pid, uint64_t parent_start, uint32_t inherited) {
  std::pair<int64_t, uint64_t> key(pid, identity);
  auto it = proc_index_.find(key);
  if (it != proc_index_.end()) return it->second;
  procs_.emplace_back();
  ProcessIds& ps = procs_.back();
  ps.pid = pid;
  if (parent_pid != 0 && parent_start != 0) {
    auto par = proc_index_.find(std::make_pair(parent_pid, parent_start));
    if (par != proc_index_.end()) {
      ps.parent = par->second;
      ps.inherited = inherited;
    }
  }
  int index = static_cast<int>(procs_.size() - 1);
  proc_index_.emplace(key, index);
  return index;
}

uint32_t Tables::Intern(std::string_view text) {
  auto it = string_index_.find(text);
  if (it != string_index_.end()) return it->second;
  uint32_t index = static_cast<uint32_t>(strings_.size());
  strings_.emplace_back(text);
  string_index_.emplace(std::string_view(strings_.back()), index);
  return index;
}

void Tables::DefineString(int proc, uint32_t local, uint32_t global) {
  ProcessIds* ps = &procs_[static_cast<size_t>(proc)];
  if (!ps->has_base) {
    ps->has_base = true;
    ps->dense_base = local & ~uint32_t(0xFFFF);
  }
  if (local >= ps->dense_base && local - ps->dense_base < kDenseStringIds) {
    uint32_t k = local - ps->dense_base;
    if (ps->dense.size() <= k) ps->dense.resize(std::max<size_t>(k + 1, ps->dense.size() * 2), 0);
    ps->dense[k] = global + 1;
  } else {
    ps->sparse[local] = global;
  }
}

bool Tables::LookupStringInAncestry(int proc, uint32_t local, uint32_t* global) const {
  const ProcessIds* ps = proc >= 0 ? &procs_[static_cast<size_t>(proc)] : nullptr;
  if (ps) {
    last_string_proc_ = proc;
    last_string_ids_ = ps;
  }
  for (int hops = 0; ps && hops < 64; ++hops) {
    if (ps->has_base && local >= ps->dense_base && local - ps->dense_base < kDenseStringIds) {
      uint32_t k = local - ps->dense_base;
      if (k < ps->dense.size() && ps->dense[k] != 0) {
        *global = ps->dense[k] - 1;
        return true;
      }
    } else {
      auto it = ps->sparse.find(local);
      if (it != ps->sparse.end()) {
        *global = it->second;
        return true;
      }
    }
    if (ps->parent < 0 || local >= ps->inherited) break;
    ps = &procs_[static_cast<size_t>(ps->parent)];
  }
  return false;
}

uint32_t Tables::LookupDomain(int proc, uint32_t local) {
  ProcessIds& ps = procs_[static_cast<size_t>(proc)];
  auto it = ps.local_domains.find(local);
  if (it != ps.local_domains.end()) {
    last_proc_ = proc;
    last_local_ = local;
    last_global_ = it->second;
    return it->second;
  }
  uint32_t index = static_cast<uint32_t>(domains_.size());
  domains_.push_back(NvtxrDomain{ps.pid, 0, local, -1});
  ps.local_domains.emplace(local, index);
  return index;
}

void Tables::CreateDomain(int proc, uint32_t local, bool named, uint32_t name, uint64_t ts) {
  if (local == 0) return;
  uint32_t global = Domain(proc, local);
  const NvtxrDomain& d = domains_[global];
  if (d.name >= 0 && named && static_cast<uint32_t>(d.name) != name) {
    // The local id was reused for another domain.
    ProcessIds& ps = procs_[static_cast<size_t>(proc)];
    global = static_cast<uint32_t>(domains_.size());
    domains_.push_back(NvtxrDomain{ps.pid, 0, local, -1});
    ps.local_domains[local] = global;
    last_proc_ = -1;
  }
  NvtxrDomain& dd = domains_[global];
  if (dd.create_ns == 0 || ts < dd.create_ns) dd.create_ns = ts;
  if (named) dd.name = static_cast<int32_t>(name);
}

void Tables::NameDomainIfUnnamed(int proc, uint32_t local, uint32_t name) {
  NvtxrDomain& d = domains_[Domain(proc, local)];
  if (d.name < 0) d.name = static_cast<int32_t>(name);
}

void Tables::NameCategory(uint32_t domain, uint32_t category, uint32_t name) {
  uint64_t key = (uint64_t(domain) << 32) | category;
  auto it = category_index_.find(key);
  if (it == category_index_.end()) {
    category_index_.emplace(key, static_cast<uint32_t>(categories_.size()));
    categories_.push_back(NvtxrCategory{domain, category, name, 0});
  } else {
    categories_[it->second].name = name;
  }
}

void Tables::NameThread(int64_t pid, int64_t tid, uint32_t name, bool override_name) {
  uint32_t ov = override_name ? 1 : 0;
  auto key = std::make_pair(pid, tid);
  auto it = thread_name_index_.find(key);
  if (it == thread_name_index_.end()) {
    thread_name_index_.emplace(key, static_cast<uint32_t>(thread_names_.size()));
    thread_names_.push_back(NvtxrThreadName{pid, tid, name, ov});
    return;
  }
  NvtxrThreadName& t = thread_names_[it->second];
  if (ov || !t.override_) {
    t.name = name;
    t.override_ = ov;
  }
}

}  // namespace nvtx_reader
