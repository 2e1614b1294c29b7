#include "plugin_host/adapter_registry.hpp"

#include <algorithm>
#include <deque>

#include "plugin_host/adapters/builtin_adapters.hpp"
#include "plugin_host/plugin_file.hpp"

namespace dpl::plugin_host {
namespace {

// The built-in adapters, then the registered ones. A deque: FindAdapter's pointers stay valid
// when an adapter is added.
std::deque<Adapter>& Registry() {
  static std::deque<Adapter> registry = [] {
    const std::vector<Adapter> builtin = adapters::BuiltinAdapters();
    return std::deque<Adapter>(builtin.begin(), builtin.end());
  }();
  return registry;
}

// The oldest version of `kind` whose adapter has capability bit `bit`.
std::string FirstAbiWith(dpl_plugin_kind kind, uint64_t bit) {
  for (uint32_t version : SupportedVersions(kind)) {
    if ((FindAdapter(kind, version)->capabilities & bit) != 0) return AbiName(kind, version);
  }
  return std::string("no ") + KindWord(kind) + " ABI this launcher supports";
}

}  // namespace

Status RegisterAdapter(const Adapter& adapter) {
  const std::string what = AbiName(adapter.kind, adapter.abi_version);
  if (adapter.abi_version == 0) return Status::InvalidArgument("no adapter for " + what);
  const bool adapts = adapter.kind == DPL_PLUGIN_KIND_BACKEND   ? adapter.backend != nullptr
                      : adapter.kind == DPL_PLUGIN_KIND_MODEL   ? adapter.model != nullptr
                      : adapter.kind == DPL_PLUGIN_KIND_DATASET ? adapter.dataset != nullptr
                                                                : false;
  if (!adapts || adapter.required == nullptr) {
    return Status::InvalidArgument("the adapter for " + what +
                                   " lacks its required entries or its interface; build it "
                                   "with MakeAdapter");
  }
  if (FindAdapter(adapter.kind, adapter.abi_version) != nullptr) {
    return Status::InvalidArgument("an adapter for " + what + " is registered already");
  }
  Registry().push_back(adapter);
  return Status::Ok();
}

const Adapter* FindAdapter(dpl_plugin_kind kind, uint32_t abi_version) {
  for (const Adapter& adapter : Registry()) {
    if (adapter.kind == kind && adapter.abi_version == abi_version) return &adapter;
  }
  return nullptr;
}

std::vector<uint32_t> SupportedVersions(dpl_plugin_kind kind) {
  std::vector<uint32_t> versions;
  for (const Adapter& adapter : Registry()) {
    if (adapter.kind == kind) versions.push_back(adapter.abi_version);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

std::string SupportedVersionsText(dpl_plugin_kind kind) {
  const std::vector<uint32_t> versions = SupportedVersions(kind);
  std::string text;
  for (size_t first = 0, last = 0; first < versions.size(); first = last + 1) {
    last = first;
    while (last + 1 < versions.size() && versions[last + 1] == versions[last] + 1) ++last;
    text += (text.empty() ? "v" : ", v") + std::to_string(versions[first]) + "..v" +
            std::to_string(versions[last]);
  }
  return text;
}

std::string AbiName(dpl_plugin_kind kind, uint32_t abi_version) {
  return std::string(KindWord(kind)) + " ABI v" + std::to_string(abi_version);
}

std::vector<std::string> NewestRequiredEntries(dpl_plugin_kind kind) {
  const std::vector<uint32_t> versions = SupportedVersions(kind);
  std::vector<std::string> names;
  if (versions.empty()) return names;
  for (const auto& entry : FindAdapter(kind, versions.back())->required(nullptr)) {
    names.emplace_back(entry.first);
  }
  return names;
}

std::string FirstAbiWith(ModelCapability capability) {
  return FirstAbiWith(DPL_PLUGIN_KIND_MODEL, CapabilitySet<ModelCapability>::Bit(capability));
}

}  // namespace dpl::plugin_host
