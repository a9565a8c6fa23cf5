// Process-wide registries for the rare NVTX calls: domains, registered strings,
// category names and thread-name overrides. Guarded by RecorderMutex(). Each call writes
// its definition records into the calling thread's stream; every new segment (output
// directory switch, forked child) gets the remembered definitions re-emitted by the
// first thread that claims a chunk in it, with the same ids.
//
// Bounded: at most kMaxRegisteredStrings registered strings (kMaxRegisteredBytes of
// text), kMaxNamedCategories categories and kMaxNamedThreads thread names are remembered
// (domains: at most 65535 by the format). Beyond that a registration still gets its own
// id and its definition in the caller's stream, but is not remembered: registering the
// same text again gives another id (of the 2^31 lasting ids, never reused: see
// string_ids.h), and it is not re-emitted into later segments.
// Readers find it there anyway when they read the process' earlier segments (or its
// parent's, for a forked child); an event naming an id a reader cannot resolve is
// counted as damage.
#ifndef NVTX_PLUGINS_TF_RECORDER_REGISTRY_H_
#define NVTX_PLUGINS_TF_RECORDER_REGISTRY_H_

#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <string>

#include "recorder/segment_writer.h"

namespace nvtx_recorder {

constexpr size_t kMaxRegisteredStrings = 8192;
constexpr size_t kMaxRegisteredBytes = 1 << 20;
constexpr size_t kMaxNamedCategories = 4096;
constexpr size_t kMaxNamedThreads = 4096;

// Domain id for `name` (the same name always maps to the same id); 0 on failure.
// Writes kStringDef + kDomainCreate unless the domain is already alive (created by
// another library in the process and not destroyed).
uint16_t CreateDomain(const char* name, size_t len);
void DestroyDomain(uint16_t domain);
// Id of the live or destroyed domain named `name`, 0 if none was created.
uint16_t FindDomain(const char* name, size_t len);
// Calls fn(domain, id, text) for every remembered registered string (takes the mutex).
void ForEachRegisteredString(const std::function<void(uint16_t, uint32_t, const std::string&)>& fn);

// Id of a registered string (same (domain, text) -> same id); 0 on failure.
uint32_t RegisterString(uint16_t domain, const char* text, size_t len);

void NameCategory(uint16_t domain, uint32_t category, const char* name, size_t len);
void NameOsThread(int64_t tid, const char* name, size_t len);

// Writes kStringDef(a new segment id) + kThreadName(tid) into ts's stream (caller holds
// RecorderMutex(), ts's stream current).
bool WriteThreadNameRecord(ThreadState* ts, int64_t tid, const char* name, size_t len, bool override_name);

// Re-emits every known definition into ts's stream (caller holds RecorderMutex()).
void EmitRegistryLocked(ThreadState* ts);

}  // namespace nvtx_recorder

#endif  // NVTX_PLUGINS_TF_RECORDER_REGISTRY_H_
