// The plugin host: loading, checking and choosing plugins (see plugin_host.hpp).
//
// Note [Why probe every version]: a plugin exports one table per ABI version it supports
// (dpl_backend_plugin_v1, ..._v2). The host looks for every version from kProbeMaxAbi down to 0,
// takes the newest one it supports, and when it supports none it can still say exactly which
// versions the file has and which the host wants, instead of "symbol not found".
#include "plugin_host/plugin_host.hpp"

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <boost/filesystem.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace dpl::plugin_host {
namespace {

namespace fs = boost::filesystem;

constexpr uint32_t kProbeMaxAbi = 16;

std::string& BuildTreePluginDir() {
  static std::string dir;
  return dir;
}

const char* KindWord(uint32_t kind) {
  switch (kind) {
    case DPL_PLUGIN_KIND_BACKEND:
      return "backend";
    case DPL_PLUGIN_KIND_MODEL:
      return "model";
  }
  return "unknown";
}

std::string SymbolName(dpl_plugin_kind kind, uint32_t version) {
  return std::string(kind == DPL_PLUGIN_KIND_BACKEND ? "dpl_backend_plugin_v"
                                                     : "dpl_model_plugin_v") +
         std::to_string(version);
}

std::string Hex(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08X", value);
  return buffer;
}

// The file names considered: *.so and *.so.<digits and dots>.
bool LooksLikeSharedLibrary(const std::string& file_name) {
  const auto position = file_name.rfind(".so");
  if (position == std::string::npos || position == 0) return false;
  const std::string tail = file_name.substr(position + 3);
  if (tail.empty()) return true;
  if (tail[0] != '.' || tail.size() < 2) return false;
  return std::all_of(tail.begin() + 1, tail.end(),
                     [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

// The checks common to both kinds, on the table found under `symbol`. Returns the reason (without
// the path) or "" when the header is sound.
std::string CheckHeader(const dpl_plugin_header& header, dpl_plugin_kind kind, uint32_t version,
                        const std::string& symbol, size_t table_size) {
  if (header.magic != DPL_PLUGIN_MAGIC) {
    return "symbol " + symbol + " has bad magic " + Hex(header.magic) + " (expected " +
           Hex(DPL_PLUGIN_MAGIC) + "); it was not built against the dpl SDK";
  }
  if (header.kind != static_cast<uint32_t>(kind)) {
    return "symbol " + symbol + " declares plugin kind " + std::to_string(header.kind) + " (" +
           KindWord(header.kind) + "), expected " + std::to_string(kind) + " (" + KindWord(kind) +
           ")";
  }
  if (header.abi_version != version) {
    return "symbol " + symbol + " declares ABI version " + std::to_string(header.abi_version) +
           ", which does not match its name; rebuild the plugin against the dpl SDK";
  }
  if (header.struct_size < table_size) {
    return "symbol " + symbol + " is a table of " + std::to_string(header.struct_size) +
           " bytes, smaller than the " + std::to_string(table_size) + " bytes of " +
           KindWord(kind) + " ABI v" + std::to_string(version) +
           "; rebuild the plugin against the dpl SDK";
  }
  if (header.name == nullptr || header.name[0] == '\0') {
    return "symbol " + symbol + " has no plugin name (header.name is NULL or empty)";
  }
  if (header.version == nullptr) {
    return "plugin '" + std::string(header.name) + "' has no version (header.version is NULL)";
  }
  return "";
}

std::string MissingFunction(const char* kind, const char* name,
                            const std::vector<std::pair<const char*, bool>>& functions) {
  for (const auto& [function, present] : functions) {
    if (!present) {
      return std::string(kind) + " plugin '" + name + "' leaves the required function '" +
             function + "' NULL";
    }
  }
  return "";
}

std::string CheckBackendTable(const dpl_backend_plugin_v1& table) {
  return MissingFunction("backend", table.header.name,
                         {{"create", table.create != nullptr},
                          {"destroy", table.destroy != nullptr},
                          {"allreduce", table.allreduce != nullptr},
                          {"broadcast", table.broadcast != nullptr},
                          {"allgather", table.allgather != nullptr},
                          {"barrier", table.barrier != nullptr},
                          {"last_error", table.last_error != nullptr}});
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

std::string CheckModelTable(const dpl_model_plugin_v2& table, uint32_t version) {
  if (version >= 2) {
    const std::string missing =
        MissingFunction("model", table.header.name,
                        {{"host_batch", table.host_batch != nullptr},
                         {"read_tensors", table.read_tensors != nullptr},
                         {"write_tensors", table.write_tensors != nullptr}});
    if (!missing.empty()) return missing;
  }
  return MissingFunction(
      "model", table.header.name,
      {{"create", table.create != nullptr},
       {"destroy", table.destroy != nullptr},
       {"describe", table.describe != nullptr},
       {"parameter", table.parameter != nullptr},
       {"set_gradient_ready_callback", table.set_gradient_ready_callback != nullptr},
       {"set_mode", table.set_mode != nullptr},
       {"zero_gradients", table.zero_gradients != nullptr},
       {"train_step", table.train_step != nullptr},
       {"eval_step", table.eval_step != nullptr},
       {"save_state", table.save_state != nullptr},
       {"load_state", table.load_state != nullptr},
       {"last_error", table.last_error != nullptr}});
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

// Loads one file; on refusal returns the reason without the path.
Result<LoadedPlugin> Load(const std::string& path) {
  auto library = std::make_shared<boost::dll::shared_library>();
  try {
    // RTLD_LOCAL: a plugin's own dependencies (libtorch, NCCL) stay out of the global namespace,
    // so two plugins cannot clash through them. RTLD_NOW: a missing symbol fails here, loudly.
    library->load(path, boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::exception& error) {
    return Status::Error("not a loadable shared library: " + DlopenText(error.what()));
  }

  struct Found {
    dpl_plugin_kind kind;
    uint32_t version;
  };
  std::vector<Found> found;  // newest first
  for (dpl_plugin_kind kind : {DPL_PLUGIN_KIND_BACKEND, DPL_PLUGIN_KIND_MODEL}) {
    for (uint32_t version = kProbeMaxAbi + 1; version-- > 0;) {
      if (library->has(SymbolName(kind, version))) found.push_back({kind, version});
    }
  }
  if (found.empty()) {
    return Status::Error("not a dpl plugin: no symbol " +
                         SymbolName(DPL_PLUGIN_KIND_BACKEND, kBackendAbiMax) + " or " +
                         SymbolName(DPL_PLUGIN_KIND_MODEL, kModelAbiMax));
  }

  const Found* chosen = nullptr;
  for (const Found& candidate : found) {
    const bool backend = candidate.kind == DPL_PLUGIN_KIND_BACKEND;
    const uint32_t min = backend ? kBackendAbiMin : kModelAbiMin;
    const uint32_t max = backend ? kBackendAbiMax : kModelAbiMax;
    if (candidate.version >= min && candidate.version <= max) {
      chosen = &candidate;
      break;
    }
  }
  if (chosen == nullptr) {
    // Explain with the newest version the file offers.
    const Found& newest = found.front();
    const bool backend = newest.kind == DPL_PLUGIN_KIND_BACKEND;
    const uint32_t min = backend ? kBackendAbiMin : kModelAbiMin;
    const uint32_t max = backend ? kBackendAbiMax : kModelAbiMax;
    const std::string supported = "(v" + std::to_string(min) + "..v" + std::to_string(max) + ")";
    const std::string what =
        std::string(KindWord(newest.kind)) + " plugin ABI v" + std::to_string(newest.version);
    if (newest.version > max) {
      return Status::Error(what + " is newer than this launcher supports " + supported +
                           "; upgrade the launcher or rebuild the plugin against SDK v" +
                           std::to_string(max));
    }
    return Status::Error(what + " is older than this launcher supports " + supported +
                         "; rebuild the plugin against SDK v" + std::to_string(max));
  }

  const std::string symbol = SymbolName(chosen->kind, chosen->version);
  LoadedPlugin plugin;
  plugin.path = path;
  plugin.kind = chosen->kind;
  plugin.abi_version = chosen->version;
  const auto& header = library->get<const dpl_plugin_header>(symbol);
  std::string reason;
  if (chosen->kind == DPL_PLUGIN_KIND_BACKEND) {
    reason =
        CheckHeader(header, chosen->kind, chosen->version, symbol, sizeof(dpl_backend_plugin_v1));
    if (reason.empty()) {
      plugin.backend = &library->get<const dpl_backend_plugin_v1>(symbol);
      reason = CheckBackendTable(*plugin.backend);
    }
  } else {
    const size_t table_size =
        chosen->version == 1 ? sizeof(dpl_model_plugin_v1) : sizeof(dpl_model_plugin_v2);
    reason = CheckHeader(header, chosen->kind, chosen->version, symbol, table_size);
    if (reason.empty()) {
      if (chosen->version == 1) {
        plugin.adapted_model = AdaptModelV1(library->get<const dpl_model_plugin_v1>(symbol));
        plugin.model = plugin.adapted_model.get();
      } else {
        plugin.model = &library->get<const dpl_model_plugin_v2>(symbol);
      }
      reason = CheckModelTable(*plugin.model, chosen->version);
    }
  }
  if (!reason.empty()) return Status::Error(reason);
  plugin.name = header.name;
  plugin.version = header.version;
  plugin.description = header.description ? header.description : "";
  plugin.library = std::move(library);
  return plugin;
}

// The install's plugin folder: <prefix>/<libdir>/dpl/plugins, with <prefix>/bin/launcher.
std::string InstallPluginDir() {
  boost::system::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (error) return "";
  return (executable.parent_path() / DPL_INSTALL_RELATIVE_PLUGIN_DIR).lexically_normal().string();
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "(none)" : text;
}

std::vector<std::string> NamesOfKind(const Discovery& discovery, dpl_plugin_kind kind) {
  std::vector<std::string> names;
  for (const auto& plugin : discovery.plugins) {
    if (plugin.kind == kind) names.push_back(plugin.name);
  }
  return names;
}

const LoadedPlugin* Lookup(const Discovery& discovery, dpl_plugin_kind kind,
                           const std::string& name) {
  for (const auto& plugin : discovery.plugins) {
    if (plugin.kind == kind && plugin.name == name) return &plugin;
  }
  return nullptr;
}

}  // namespace

void SetBuildTreePluginDir(const std::string& dir) {
  BuildTreePluginDir() = dir;
}

Status DescribeCallFailure(const LoadedPlugin& plugin, const std::string& function,
                           dpl_status status) {
  if (status == DPL_OK) return Status::Ok();
  const char* message = nullptr;
  if (plugin.backend != nullptr) message = plugin.backend->last_error();
  if (plugin.model != nullptr) message = plugin.model->last_error();
  return PluginCallFailure(LabelOf(plugin), function, status, message);
}

PluginLabel LabelOf(const LoadedPlugin& plugin) {
  return {KindWord(plugin.kind), plugin.name, plugin.path};
}

Result<LoadedPlugin> LoadPluginFile(const std::string& path) {
  auto plugin = Load(path);
  if (!plugin.ok()) return plugin.status().WithContext(path);
  return plugin;
}

std::vector<std::string> PluginSearchPath(const std::vector<std::string>& plugin_dirs) {
  std::vector<std::string> candidates = plugin_dirs;
  if (const char* env = std::getenv("DPL_PLUGIN_PATH")) {
    std::stringstream stream(env);
    std::string dir;
    while (std::getline(stream, dir, ':')) {
      if (!dir.empty()) candidates.push_back(dir);
    }
  }
  // The install folder when this launcher is installed; otherwise, when it runs from its build
  // tree, the build tree's plugin folder (never both, or every plugin would be found twice).
  const std::string install_dir = InstallPluginDir();
  boost::system::error_code error;
  if (!install_dir.empty() && fs::is_directory(install_dir, error)) {
    candidates.push_back(install_dir);
  } else if (!BuildTreePluginDir().empty()) {
    const fs::path build_root = fs::path(BuildTreePluginDir()).parent_path();
    const fs::path executable = fs::read_symlink("/proc/self/exe", error);
    const std::string root = build_root.lexically_normal().string() + "/";
    if (!error && executable.string().rfind(root, 0) == 0) {
      candidates.push_back(BuildTreePluginDir());
    }
  }

  std::vector<std::string> search_path;
  std::set<std::string> seen;
  for (const auto& dir : candidates) {
    const fs::path canonical = fs::weakly_canonical(dir, error);
    const std::string key = error ? dir : canonical.string();
    if (seen.insert(key).second) search_path.push_back(dir);
  }
  return search_path;
}

Result<Discovery> DiscoverPlugins(const std::vector<std::string>& plugin_dirs) {
  for (const auto& dir : plugin_dirs) {
    boost::system::error_code error;
    if (!fs::is_directory(dir, error)) {
      return Status::Error("--plugin-dir " + dir +
                           " is not a folder; pass a folder holding "
                           "plugin .so files");
    }
  }
  Discovery discovery;
  discovery.search_path = PluginSearchPath(plugin_dirs);
  std::set<std::string> loaded_files;  // canonical paths: a symlinked .so counts once
  for (const auto& dir : discovery.search_path) {
    boost::system::error_code error;
    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
      if (LooksLikeSharedLibrary(it->path().filename().string()) &&
          fs::is_regular_file(it->path(), error)) {
        files.push_back(it->path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      const std::string canonical = fs::canonical(file, error).string();
      if (!error && !loaded_files.insert(canonical).second) continue;
      auto plugin = Load(file.string());
      if (!plugin.ok()) {
        discovery.refused.push_back({file.string(), plugin.status().message()});
        continue;
      }
      if (const LoadedPlugin* twin = Lookup(discovery, plugin->kind, plugin->name)) {
        return Status::Error(std::string("two ") + KindWord(plugin->kind) + " plugins are named '" +
                             plugin->name + "': " + twin->path + " and " + file.string() +
                             "; remove or rename one of them");
      }
      discovery.plugins.push_back(std::move(plugin).value());
    }
  }
  return discovery;
}

Result<LoadedPlugin> FindPlugin(const Discovery& discovery, dpl_plugin_kind kind,
                                const std::string& name) {
  if (const LoadedPlugin* plugin = Lookup(discovery, kind, name)) return *plugin;
  const std::string flag = kind == DPL_PLUGIN_KIND_BACKEND ? "--backend" : "--model";
  std::string text = "unknown " + flag + " '" + name + "'; the " + KindWord(kind) +
                     " plugins found are: " + JoinNames(NamesOfKind(discovery, kind)) +
                     " (searched: " + JoinNames(discovery.search_path) + ")";
  for (const auto& refused : discovery.refused) {
    text += "; refused " + refused.path + ": " + refused.reason;
  }
  return Status::Error(text);
}

Result<LoadedPlugin> ChooseBackend(const Discovery& discovery, const std::string& requested,
                                   const std::string& device, std::string* reason) {
  auto explain = [&](const std::string& text) {
    if (reason != nullptr) *reason = text;
  };
  if (requested != "auto") {
    explain("--backend " + requested + " was requested");
    return FindPlugin(discovery, DPL_PLUGIN_KIND_BACKEND, requested);
  }
  const bool cuda = device == "cuda";
  if (cuda) {
    if (const LoadedPlugin* nccl = Lookup(discovery, DPL_PLUGIN_KIND_BACKEND, "nccl")) {
      explain("--backend auto chose nccl: the device is cuda and the nccl plugin is present");
      return *nccl;
    }
  }
  const std::string why_not_nccl =
      cuda ? "the device is cuda but no nccl plugin was found" : "the device is " + device;
  if (const LoadedPlugin* gloo = Lookup(discovery, DPL_PLUGIN_KIND_BACKEND, "gloo")) {
    explain("--backend auto chose gloo: " + why_not_nccl);
    return *gloo;
  }
  if (const LoadedPlugin* tcp = Lookup(discovery, DPL_PLUGIN_KIND_BACKEND, "tcp")) {
    explain("--backend auto chose tcp: " + why_not_nccl + " and no gloo plugin was found");
    return *tcp;
  }
  return Status::Error(
      "--backend auto found none of nccl, gloo, tcp; the backend plugins found "
      "are: " +
      JoinNames(NamesOfKind(discovery, DPL_PLUGIN_KIND_BACKEND)) + " (searched: " +
      JoinNames(discovery.search_path) + "); pass --backend <name> or --plugin-dir");
}

std::string FormatPluginList(const Discovery& discovery) {
  std::vector<std::vector<std::string>> rows = {{"KIND", "NAME", "VERSION", "ABI", "PATH"}};
  for (const auto& plugin : discovery.plugins) {
    rows.push_back({KindWord(plugin.kind), plugin.name, plugin.version,
                    "v" + std::to_string(plugin.abi_version), plugin.path});
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream text;
  text << "plugin search path: " << JoinNames(discovery.search_path) << "\n";
  if (discovery.plugins.empty()) {
    text << "no plugins found\n";
  } else {
    for (const auto& row : rows) {
      for (size_t i = 0; i < row.size(); ++i) {
        text << row[i];
        if (i + 1 < row.size()) text << std::string(widths[i] - row[i].size() + 2, ' ');
      }
      text << "\n";
    }
  }
  if (!discovery.refused.empty()) {
    text << "refused:\n";
    for (const auto& refused : discovery.refused) {
      text << "  " << refused.path << ": " << refused.reason << "\n";
    }
  }
  return text.str();
}

}  // namespace dpl::plugin_host
