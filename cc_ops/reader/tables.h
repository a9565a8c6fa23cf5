// Tables that live for the whole decode: strings, domains, categories and thread names
// (the rows hold indexes into them), and per process the maps from its local string
// and domain ids to those indexes. Processes are numbered in the order first seen.
#ifndef NVTX_PLUGINS_TF_READER_TABLES_H_
#define NVTX_PLUGINS_TF_READER_TABLES_H_

#include <stddef.h>
#include <stdint.h>

#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "reader/decode.h"

namespace nvtx_reader {

class Tables {
 public:
  Tables();

  // Index of the process (pid, identity) -- identity is the process_start_ns of its
  // segments, or anything unique for segments of older writers -- created on first use.
  // A new process whose parent (parent_pid, parent_start) is known resolves its string
  // ids below `inherited` through the parent.
  int Process(int64_t pid, uint64_t identity, int64_t parent_pid, uint64_t parent_start, uint32_t inherited);

  uint32_t Intern(std::string_view text);
  // Local string id `local` of process `proc` is the global string `global`.
  void DefineString(int proc, uint32_t local, uint32_t global);
  // Global index of a local string id of process `proc` (or, for an inherited id, of
  // its parent); false when never defined. Id 0 is the empty string.
  bool LookupString(int proc, uint32_t local, uint32_t* global) const {
    if (local == 0) {
      *global = 0;
      return true;
    }
    // (inline: the process's own dense ids, the last process looked up; else the full rule)
    if (proc == last_string_proc_ && proc >= 0) {
      const ProcessIds& ps = *last_string_ids_;
      uint32_t k = local - ps.dense_base;
      if (ps.has_base && local >= ps.dense_base && k < ps.dense.size() && ps.dense[k] != 0) {
        *global = ps.dense[k] - 1;
        return true;
      }
    }
    return LookupStringInAncestry(proc, local, global);
  }

  // Global index of a local domain id of process `proc` (0 = default domain), created
  // unnamed on first use.
  uint32_t Domain(int proc, uint32_t local) {
    if (local == 0) return 0;
    if (proc == last_proc_ && local == last_local_) return last_global_;  // (inline: the last one)
    return LookupDomain(proc, local);
  }
  // kDomainCreate: names the domain (a second name for the same local id means the id
  // was reused for another domain: a new global domain) and notes its creation time.
  void CreateDomain(int proc, uint32_t local, bool named, uint32_t name, uint64_t ts);
  // Names the domain unless it already has a name.
  void NameDomainIfUnnamed(int proc, uint32_t local, uint32_t name);
  void NameCategory(uint32_t domain, uint32_t category, uint32_t name);
  // A thread name set by nvtxNameOsThread (override) wins over the OS name.
  void NameThread(int64_t pid, int64_t tid, uint32_t name, bool override_name);

  const std::deque<std::string>& strings() const { return strings_; }
  const std::vector<NvtxrDomain>& domains() const { return domains_; }
  const std::vector<NvtxrCategory>& categories() const { return categories_; }
  const std::vector<NvtxrThreadName>& thread_names() const { return thread_names_; }

 private:
  struct ProcessIds {
    int64_t pid = 0;
    int parent = -1;         // index of the parent process, -1 when unknown
    uint32_t inherited = 0;  // string ids below this belong to the parent
    uint32_t dense_base = 0;
    bool has_base = false;
    std::vector<uint32_t> dense;  // local id - dense_base -> global index + 1 (0 = unknown)
    std::unordered_map<uint32_t, uint32_t> sparse;
    std::unordered_map<uint32_t, uint32_t> local_domains;  // local id -> global index
  };

  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, uint32_t> string_index_;
  std::vector<NvtxrDomain> domains_;
  std::vector<NvtxrCategory> categories_;
  std::unordered_map<uint64_t, uint32_t> category_index_;  // (domain << 32 | category)
  std::vector<NvtxrThreadName> thread_names_;
  std::map<std::pair<int64_t, int64_t>, uint32_t> thread_name_index_;  // (pid, tid)
  std::deque<ProcessIds> procs_;
  // The last Domain() looked up (a thread's events come in runs of one domain); reset when
  // CreateDomain maps a local id anew.
  int last_proc_ = -1;
  uint32_t last_local_ = 0, last_global_ = 0;
  // The last process LookupString looked up, and its ids (a deque's elements stay where they are).
  bool LookupStringInAncestry(int proc, uint32_t local, uint32_t* global) const;
  uint32_t LookupDomain(int proc, uint32_t local);  // (Domain of another than the last one)
  mutable int last_string_proc_ = -1;
  mutable const ProcessIds* last_string_ids_ = nullptr;
  std::map<std::pair<int64_t, uint64_t>, int> proc_index_;  // (pid, identity) -> procs_
};

}  // namespace nvtx_reader

#endif  // NVTX_PLUGINS_TF_READER_TABLES_H_
