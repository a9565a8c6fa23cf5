#include "tf_ops/nvtx_handles.h"

#include <map>
#include <mutex>
#include <utility>

namespace nvtx_tf {
namespace {

std::mutex& CacheMutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: kernels may outlive statics
  return *mu;
}

std::map<std::string, nvtxDomainHandle_t>& Domains() {
  static auto* domains = new std::map<std::string, nvtxDomainHandle_t>;
  return *domains;
}

std::map<std::pair<nvtxDomainHandle_t, std::string>, nvtxStringHandle_t>& Strings() {
  static auto* strings = new std::map<std::pair<nvtxDomainHandle_t, std::string>, nvtxStringHandle_t>;
  return *strings;
}

}  // namespace

nvtxDomainHandle_t DomainFor(const std::string& name) {
  if (name.empty()) return nullptr;
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto it = Domains().find(name);
  if (it != Domains().end()) return it->second;
  nvtxDomainHandle_t handle = nvtxDomainCreateA(name.c_str());
  Domains().emplace(name, handle);
  return handle;
}

nvtxStringHandle_t RegisteredString(nvtxDomainHandle_t domain, const std::string& text) {
  std::lock_guard<std::mutex> lock(CacheMutex());
  auto key = std::make_pair(domain, text);
  auto it = Strings().find(key);
  if (it != Strings().end()) return it->second;
  nvtxStringHandle_t handle = nvtxDomainRegisterStringA(domain, text.c_str());
  Strings().emplace(std::move(key), handle);
  return handle;
}

absl::Status MakeEventSpec(const std::string& message, const std::string& domain_name,
                           int64_t color, int64_t category, EventSpec* spec) {
  if (color < 0 || color > 0xFFFFFFFFLL) {
    return absl::InvalidArgumentError("NVTX op attribute 'color' must be a 32-bit ARGB value");
  }
  if (category < 0 || category > 0xFFFFFFFFLL) {
    return absl::InvalidArgumentError("NVTX op attribute 'category' must be in [0, 2**32)");
  }
  if (message.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("NVTX op attribute 'message' must not contain NUL");
  }
  spec->domain = DomainFor(domain_name);
  nvtxEventAttributes_t& a = spec->attributes;
  a = nvtxEventAttributes_t{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = static_cast<uint32_t>(category);
  if (color != 0) {
    a.colorType = NVTX_COLOR_ARGB;
    a.color = static_cast<uint32_t>(color);
  }
  nvtxStringHandle_t registered = RegisteredString(spec->domain, message);
  if (registered != nullptr) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = registered;
  } else {
    // The tool registers no strings (or none is attached): pass the text itself.
    spec->message = message;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = spec->message.c_str();
  }
  return absl::OkStatus();
}

}  // namespace nvtx_tf
