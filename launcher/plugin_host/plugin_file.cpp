// Loading one plugin file: finding its entry symbol, checking its table, adapting older layouts.
//
// Note [Finding the entry symbol]: a plugin exports one table per ABI version it supports
// (dpl_backend_plugin_v1, ..._v2, ...). The host lists the file's exported symbols and takes
// every name of the form dpl_<kind>_plugin_v<N>, so it can say exactly which versions a file has
// and which the host wants (even for a version far beyond its own), instead of "symbol not
// found"; it uses the newest version it supports.
#include <algorithm>
#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdio>
#include <regex>

#include "plugin_host/plugin_host.hpp"

namespace dpl::plugin_host {
namespace {

struct KindInfo {
  dpl_plugin_kind kind;
  const char* word;
  const char* symbol_prefix;
  uint32_t min_abi, max_abi;
};

constexpr KindInfo kKinds[] = {
    {DPL_PLUGIN_KIND_BACKEND, "backend", "dpl_backend_plugin_v", kBackendAbiMin, kBackendAbiMax},
    {DPL_PLUGIN_KIND_MODEL, "model", "dpl_model_plugin_v", kModelAbiMin, kModelAbiMax},
    {DPL_PLUGIN_KIND_DATASET, "dataset", "dpl_dataset_plugin_v", kDatasetAbiMin, kDatasetAbiMax},
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
    for (uint32_t version = kind.max_abi + 1; version-- > 0;) {
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

using FunctionList = std::vector<std::pair<const char*, bool>>;

#define DPL_FUNCTION(table, name) \
  { #name, (table).name != nullptr }

FunctionList BackendFunctions(const dpl_backend_plugin_v1& t) {
  return {DPL_FUNCTION(t, create),    DPL_FUNCTION(t, destroy),   DPL_FUNCTION(t, allreduce),
          DPL_FUNCTION(t, broadcast), DPL_FUNCTION(t, allgather), DPL_FUNCTION(t, barrier),
          DPL_FUNCTION(t, last_error)};
}

FunctionList BackendFunctions(const dpl_backend_plugin_v2& t) {
  return {DPL_FUNCTION(t, create),     DPL_FUNCTION(t, destroy),    DPL_FUNCTION(t, allreduce),
          DPL_FUNCTION(t, broadcast),  DPL_FUNCTION(t, allgather),  DPL_FUNCTION(t, barrier),
          DPL_FUNCTION(t, last_error), DPL_FUNCTION(t, synchronize)};
}

// Version 1's functions of a model table in the v2 layout, then v2's when `version` >= 2.
FunctionList ModelFunctions(const dpl_model_plugin_v2& t, uint32_t version) {
  FunctionList list = {DPL_FUNCTION(t, create),
                       DPL_FUNCTION(t, destroy),
                       DPL_FUNCTION(t, describe),
                       DPL_FUNCTION(t, parameter),
                       DPL_FUNCTION(t, set_gradient_ready_callback),
                       DPL_FUNCTION(t, set_mode),
                       DPL_FUNCTION(t, zero_gradients),
                       DPL_FUNCTION(t, train_step),
                       DPL_FUNCTION(t, eval_step),
                       DPL_FUNCTION(t, save_state),
                       DPL_FUNCTION(t, load_state),
                       DPL_FUNCTION(t, last_error)};
  if (version >= 2) {
    list.insert(list.begin(), {DPL_FUNCTION(t, host_batch), DPL_FUNCTION(t, read_tensors),
                               DPL_FUNCTION(t, write_tensors)});
  }
  return list;
}

FunctionList ModelFunctions(const dpl_model_plugin_v3& t) {
  return {DPL_FUNCTION(t, buffer),        DPL_FUNCTION(t, read_buffers),
          DPL_FUNCTION(t, write_buffers), DPL_FUNCTION(t, rng_state),
          DPL_FUNCTION(t, set_rng_state), DPL_FUNCTION(t, host_batch_slot),
          DPL_FUNCTION(t, host_batch),    DPL_FUNCTION(t, read_tensors),
          DPL_FUNCTION(t, write_tensors), DPL_FUNCTION(t, create),
          DPL_FUNCTION(t, destroy),       DPL_FUNCTION(t, describe),
          DPL_FUNCTION(t, parameter),     DPL_FUNCTION(t, set_gradient_ready_callback),
          DPL_FUNCTION(t, set_mode),      DPL_FUNCTION(t, zero_gradients),
          DPL_FUNCTION(t, train_step),    DPL_FUNCTION(t, eval_step),
          DPL_FUNCTION(t, save_state),    DPL_FUNCTION(t, load_state),
          DPL_FUNCTION(t, last_error),    DPL_FUNCTION(t, set_loss_scale)};
}

FunctionList DatasetFunctions(const dpl_dataset_plugin_v1& t) {
  return {DPL_FUNCTION(t, create), DPL_FUNCTION(t, destroy), DPL_FUNCTION(t, describe),
          DPL_FUNCTION(t, fill), DPL_FUNCTION(t, last_error)};
}

#undef DPL_FUNCTION

std::string MissingFunction(const char* kind, const char* name, const FunctionList& functions) {
  for (const auto& [function, present] : functions) {
    if (!present) {
      return std::string(kind) + " plugin '" + name + "' leaves the required function '" +
             function + "' NULL";
    }
  }
  return "";
}

// Note [Adapting model ABI v1]: version 2 kept every v1 function, in order and with its
// contract, and appended host_batch, read_tensors and write_tensors. A v1 table is copied into
// the v2 layout with those three NULL; the trainer then keeps batches in its own memory and
// trains only on the CPU, where it can update the parameters in place.
std::shared_ptr<const dpl_model_plugin_v2> AdaptModelV1(const dpl_model_plugin_v1& v1) {
  auto v2 = std::make_shared<dpl_model_plugin_v2>();
  v2->header = v1.header;
  v2->create = v1.create;
  v2->destroy = v1.destroy;
  v2->describe = v1.describe;
  v2->parameter = v1.parameter;
  v2->set_gradient_ready_callback = v1.set_gradient_ready_callback;
  v2->set_mode = v1.set_mode;
  v2->zero_gradients = v1.zero_gradients;
  v2->train_step = v1.train_step;
  v2->eval_step = v1.eval_step;
  v2->save_state = v1.save_state;
  v2->load_state = v1.load_state;
  v2->last_error = v1.last_error;
  v2->host_batch = nullptr;
  v2->read_tensors = nullptr;
  v2->write_tensors = nullptr;
  return v2;
}

// Points `plugin`'s table for `kind` at version `version`; returns why it is refused, or "".
std::string TakeTable(const boost::dll::shared_library& library, const KindInfo& kind,
                      uint32_t version, LoadedPlugin* plugin) {
  const std::string symbol = SymbolName(kind, version);
  const auto& header = library.get<const dpl_plugin_header>(symbol);
  auto checked = [&](size_t size, auto* table, auto list) -> std::string {
    std::string reason = CheckHeader(header, kind, version, symbol, size);
    if (!reason.empty()) return reason;
    *table = &library.get<std::remove_pointer_t<std::remove_reference_t<decltype(*table)>>>(symbol);
    return MissingFunction(kind.word, header.name, list(**table));
  };
  switch (kind.kind) {
    case DPL_PLUGIN_KIND_BACKEND:
      if (version == 1) {
        return checked(sizeof(dpl_backend_plugin_v1), &plugin->backend_v1,
                       [](const dpl_backend_plugin_v1& t) { return BackendFunctions(t); });
      }
      return checked(sizeof(dpl_backend_plugin_v2), &plugin->backend_v2,
                     [](const dpl_backend_plugin_v2& t) { return BackendFunctions(t); });
    case DPL_PLUGIN_KIND_MODEL:
      if (version == 3) {
        return checked(sizeof(dpl_model_plugin_v3), &plugin->model_v3,
                       [](const dpl_model_plugin_v3& t) { return ModelFunctions(t); });
      }
      if (version == 2) {
        return checked(sizeof(dpl_model_plugin_v2), &plugin->model,
                       [](const dpl_model_plugin_v2& t) { return ModelFunctions(t, 2); });
      } else {
        const dpl_model_plugin_v1* v1 = nullptr;
        std::string reason = checked(sizeof(dpl_model_plugin_v1), &v1,
                                     [](const dpl_model_plugin_v1&) { return FunctionList{}; });
        if (!reason.empty()) return reason;
        plugin->adapted_model = AdaptModelV1(*v1);
        plugin->model = plugin->adapted_model.get();
        return MissingFunction(kind.word, header.name, ModelFunctions(*plugin->model, 1));
      }
    case DPL_PLUGIN_KIND_DATASET:
      return checked(sizeof(dpl_dataset_plugin_v1), &plugin->dataset,
                     [](const dpl_dataset_plugin_v1& t) { return DatasetFunctions(t); });
  }
  return "unknown plugin kind";
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
  const std::string supported =
      "(v" + std::to_string(kind.min_abi) + "..v" + std::to_string(kind.max_abi) + ")";
  const std::string what =
      std::string(kind.word) + " plugin ABI v" + std::to_string(newest.version);
  if (newest.version > kind.max_abi) {
    return what + " is newer than this launcher supports " + supported +
           "; upgrade the launcher or rebuild the plugin against SDK v" +
           std::to_string(kind.max_abi);
  }
  return what + " is older than this launcher supports " + supported +
         "; rebuild the plugin against SDK v" + std::to_string(kind.max_abi);
}

}  // namespace

const char* KindWord(uint32_t kind) {
  const KindInfo* info = InfoOf(kind);
  return info ? info->word : "unknown";
}

std::vector<std::string> RequiredFunctions(dpl_plugin_kind kind) {
  FunctionList list;
  if (kind == DPL_PLUGIN_KIND_BACKEND) list = BackendFunctions(dpl_backend_plugin_v2{});
  if (kind == DPL_PLUGIN_KIND_MODEL) list = ModelFunctions(dpl_model_plugin_v3{});
  if (kind == DPL_PLUGIN_KIND_DATASET) list = DatasetFunctions(dpl_dataset_plugin_v1{});
  std::vector<std::string> names;
  for (const auto& entry : list) names.emplace_back(entry.first);
  return names;
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
    return Status::Error("not a dpl plugin: no symbol " + SymbolName(kKinds[0], kBackendAbiMax) +
                         ", " + SymbolName(kKinds[1], kModelAbiMax) + " or " +
                         SymbolName(kKinds[2], kDatasetAbiMax));
  }
  const EntrySymbol* chosen = nullptr;
  for (const EntrySymbol& candidate : found) {
    if (candidate.version >= candidate.kind->min_abi &&
        candidate.version <= candidate.kind->max_abi) {
      chosen = &candidate;
      break;
    }
  }
  if (chosen == nullptr) return Status::Error(Unsupported(found.front()));
  LoadedPlugin plugin;
  plugin.path = path;
  plugin.kind = chosen->kind->kind;
  plugin.abi_version = chosen->version;
  const std::string reason = TakeTable(*library, *chosen->kind, chosen->version, &plugin);
  if (!reason.empty()) return Status::Error(reason);
  const auto& header =
      library->get<const dpl_plugin_header>(SymbolName(*chosen->kind, chosen->version));
  plugin.name = header.name;
  plugin.version = header.version;
  plugin.description = header.description ? header.description : "";
  plugin.library = std::move(library);
  return plugin;
}

}  // namespace dpl::plugin_host
