// Loading one plugin file: finding its entry symbol, checking its table, and turning it into the
// kind's one interface through the adapter of its ABI version (adapter_registry.hpp).
//
// Note [Finding the entry symbol]: a plugin exports one table per ABI version it supports
// (dpl_backend_plugin_v1, ..._v2, ...). The host lists the file's exported symbols and takes
// every name of the form dpl_<kind>_plugin_v<N>, so it can say exactly which versions a file has
// and which the host wants (even for a version far beyond its own), instead of "symbol not
// found"; it uses the newest version it has an adapter for.
#include <algorithm>
#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdio>
#include <regex>

#include "plugin_host/adapter_registry.hpp"
#include "plugin_host/plugin_host.hpp"

namespace dpl::plugin_host {
namespace {

struct KindInfo {
  dpl_plugin_kind kind;
  const char* word;
  const char* symbol_prefix;
};

constexpr KindInfo kKinds[] = {
    {DPL_PLUGIN_KIND_BACKEND, "backend", "dpl_backend_plugin_v"},
    {DPL_PLUGIN_KIND_MODEL, "model", "dpl_model_plugin_v"},
    {DPL_PLUGIN_KIND_DATASET, "dataset", "dpl_dataset_plugin_v"},
};

const KindInfo* InfoOf(uint32_t kind) {
  for (const KindInfo& info : kKinds) {
    if (static_cast<uint32_t>(info.kind) == kind) return &info;
  }
  return nullptr;
}

std::string SymbolName(const KindInfo& kind, uint32_t version) {
  return kind.symbol_prefix + std::to_string(version);
}

uint32_t NewestVersion(const KindInfo& kind) {
  return SupportedVersions(kind.kind).back();
}

std::string Hex(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08X", value);
  return buffer;
}

struct EntrySymbol {
  const KindInfo* kind;
  uint32_t version;
};

// Every dpl entry symbol the file exports (Note [Finding the entry symbol]), newest first; the
// loaded library answers for the versions this host knows when the file's table cannot be read.
std::vector<EntrySymbol> EntrySymbols(const std::string& path,
                                      const boost::dll::shared_library& library) {
  static const std::regex pattern("dpl_(backend|model|dataset)_plugin_v([0-9]{1,9})");
  std::vector<EntrySymbol> found;
  auto add = [&](const KindInfo& kind, uint32_t version) {
    for (const EntrySymbol& entry : found) {
      if (entry.kind == &kind && entry.version == version) return;
    }
    found.push_back({&kind, version});
  };
  try {
    boost::dll::library_info info(path, /*throw_if_not_native=*/false);
    for (const std::string& symbol : info.symbols()) {
      std::smatch match;
      if (!std::regex_match(symbol, match, pattern)) continue;
      for (const KindInfo& kind : kKinds) {
        if (match[1] == std::string(kind.word)) add(kind, uint32_t(std::stoul(match[2])));
      }
    }
  } catch (const std::exception&) {
    // Not readable as an ELF file after all: ask the loaded library below.
  }
  for (const KindInfo& kind : kKinds) {
    for (uint32_t version = NewestVersion(kind) + 1; version-- > 0;) {
      if (library.has(SymbolName(kind, version))) add(kind, version);
    }
  }
  std::sort(found.begin(), found.end(), [](const EntrySymbol& a, const EntrySymbol& b) {
    return a.kind->kind != b.kind->kind ? a.kind->kind < b.kind->kind : a.version > b.version;
  });
  return found;
}

// The checks common to every kind, on the table found under `symbol`: the reason (without the
// path), or "" when the header is sound.
std::string CheckHeader(const dpl_plugin_header& header, const KindInfo& kind, uint32_t version,
                        const std::string& symbol, size_t table_size) {
  if (header.magic != DPL_PLUGIN_MAGIC) {
    return "symbol " + symbol + " has bad magic " + Hex(header.magic) + " (expected " +
           Hex(DPL_PLUGIN_MAGIC) + "); it was not built against the dpl SDK";
  }
  if (header.kind != static_cast<uint32_t>(kind.kind)) {
    const KindInfo* declared = InfoOf(header.kind);
    return "symbol " + symbol + " declares plugin kind " + std::to_string(header.kind) + " (" +
           (declared ? declared->word : "unknown") + "), expected " + std::to_string(kind.kind) +
           " (" + kind.word + ")";
  }
  if (header.abi_version != version) {
    return "symbol " + symbol + " declares ABI version " + std::to_string(header.abi_version) +
           ", which does not match its name; rebuild the plugin against the dpl SDK";
  }
  if (header.struct_size < table_size) {
    return "symbol " + symbol + " is a table of " + std::to_string(header.struct_size) +
           " bytes, smaller than the " + std::to_string(table_size) + " bytes of " + kind.word +
           " ABI v" + std::to_string(version) + "; rebuild the plugin against the dpl SDK";
  }
  if (header.name == nullptr || header.name[0] == '\0') {
    return "symbol " + symbol + " has no plugin name (header.name is NULL or empty)";
  }
  if (header.version == nullptr) {
    return "plugin '" + std::string(header.name) + "' has no version (header.version is NULL)";
  }
  return "";
}

std::string MissingEntry(const char* kind, const char* name, const RequiredEntries& entries) {
  for (const auto& [entry, present] : entries) {
    if (!present) {
      return std::string(kind) + " plugin '" + name + "' leaves the required function '" + entry +
             "' NULL";
    }
  }
  return "";
}

// The interface's owner keeps the library mapped while the interface lives.
template <typename Interface>
std::shared_ptr<const Interface> Keeping(Interface interface, std::shared_ptr<void> library) {
  return std::shared_ptr<const Interface>(
      new Interface(std::move(interface)),
      [library = std::move(library)](const Interface* owned) { delete owned; });
}

// Sets `plugin`'s interface from the table under the entry symbol of `adapter`'s version; returns
// why the table is refused, or "".
std::string TakeTable(const std::shared_ptr<boost::dll::shared_library>& library,
                      const KindInfo& kind, const Adapter& adapter, LoadedPlugin* plugin) {
  const std::string symbol = SymbolName(kind, adapter.abi_version);
  const auto& header = library->get<const dpl_plugin_header>(symbol);
  std::string reason = CheckHeader(header, kind, adapter.abi_version, symbol, adapter.table_size);
  if (reason.empty()) reason = MissingEntry(kind.word, header.name, adapter.required(&header));
  if (!reason.empty()) return reason;
  switch (kind.kind) {
    case DPL_PLUGIN_KIND_BACKEND:
      plugin->backend = Keeping(AdaptTable<BackendInterface>(adapter, &header), library);
      break;
    case DPL_PLUGIN_KIND_MODEL:
      plugin->model = Keeping(AdaptTable<ModelInterface>(adapter, &header), library);
      break;
    case DPL_PLUGIN_KIND_DATASET:
      plugin->dataset = Keeping(AdaptTable<DatasetInterface>(adapter, &header), library);
      break;
  }
  plugin->name = header.name;
  plugin->version = header.version;
  plugin->description = header.description ? header.description : "";
  return "";
}

// Boost.DLL reports "boost::dll::shared_library::load() failed (dlerror system message: X):
// Y"; the user needs only dlopen's own text X.
std::string DlopenText(const std::string& boost_message) {
  const std::string marker = "dlerror system message: ";
  const auto begin = boost_message.find(marker);
  if (begin == std::string::npos) return boost_message;
  const auto text_begin = begin + marker.size();
  const auto end = boost_message.rfind(')');
  if (end == std::string::npos || end < text_begin) return boost_message.substr(text_begin);
  return boost_message.substr(text_begin, end - text_begin);
}

std::string Unsupported(const EntrySymbol& newest) {
  const KindInfo& kind = *newest.kind;
  const std::vector<uint32_t> versions = SupportedVersions(kind.kind);
  const std::string supported = "(" + SupportedVersionsText(kind.kind) + ")";
  const std::string what =
      std::string(kind.word) + " plugin ABI v" + std::to_string(newest.version);
  const std::string rebuild = "rebuild the plugin against SDK v" + std::to_string(versions.back());
  if (newest.version > versions.back()) {
    return what + " is newer than this launcher supports " + supported +
           "; upgrade the launcher or " + rebuild;
  }
  if (newest.version < versions.front()) {
    return what + " is older than this launcher supports " + supported + "; " + rebuild;
  }
  return what + " is not one this launcher supports " + supported + "; " + rebuild;
}

}  // namespace

const char* KindWord(uint32_t kind) {
  const KindInfo* info = InfoOf(kind);
  return info ? info->word : "unknown";
}

std::vector<std::string> RequiredFunctions(dpl_plugin_kind kind) {
  return NewestRequiredEntries(kind);
}

// Loads one file; on refusal returns the reason without the path.
Result<LoadedPlugin> LoadWithoutPath(const std::string& path) {
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    // RTLD_LOCAL: a plugin's own dependencies (libtorch, NCCL) stay out of the global namespace,
    // so two plugins cannot clash through them. RTLD_NOW: a missing symbol fails here, loudly.
    library->load(path, boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::exception& error) {
    return Status::Error("not a loadable shared library: " + DlopenText(error.what()));
  }
  const std::vector<EntrySymbol> found = EntrySymbols(path, *library);
  if (found.empty()) {
    return Status::Error("not a dpl plugin: no symbol " +
                         SymbolName(kKinds[0], NewestVersion(kKinds[0])) + ", " +
                         SymbolName(kKinds[1], NewestVersion(kKinds[1])) + " or " +
                         SymbolName(kKinds[2], NewestVersion(kKinds[2])));
  }
  for (const EntrySymbol& candidate : found) {
    const Adapter* adapter = FindAdapter(candidate.kind->kind, candidate.version);
    if (adapter == nullptr) continue;
    LoadedPlugin plugin;
    plugin.path = path;
    plugin.kind = candidate.kind->kind;
    plugin.abi_version = candidate.version;
    const std::string reason = TakeTable(library, *candidate.kind, *adapter, &plugin);
    if (!reason.empty()) return Status::Error(reason);
    plugin.library = std::move(library);
    return plugin;
  }
  return Status::Error(Unsupported(found.front()));
}

}  // namespace dpl::plugin_host
