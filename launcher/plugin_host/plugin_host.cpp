// The plugin host: loading, checking and choosing plugins (see plugin_host.hpp).
//
#include "plugin_host/plugin_host.hpp"

#include "plugin_host/adapter_registry.hpp"
#include "plugin_host/plugin_file.hpp"

#include <algorithm>
#include <boost/filesystem.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace dpl::plugin_host {
namespace {

namespace fs = boost::filesystem;

std::string& BuildTreePluginDir() {
  static std::string dir;
  return dir;
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
  if (plugin.dataset != nullptr) message = plugin.dataset->last_error();
  return PluginCallFailure(LabelOf(plugin), function, status, message);
}

PluginLabel LabelOf(const LoadedPlugin& plugin) {
  return {KindWord(plugin.kind), plugin.name, plugin.path};
}

Result<LoadedPlugin> LoadPluginFile(const std::string& path) {
  auto plugin = LoadWithoutPath(path);
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
      auto plugin = LoadWithoutPath(file.string());
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
  const std::string flag = kind == DPL_PLUGIN_KIND_BACKEND ? "--backend"
                           : kind == DPL_PLUGIN_KIND_MODEL ? "--model"
                                                           : "--data";
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

// What a backend of an older ABI lacks, and what that costs ("" when it lacks nothing).
std::string BackendLacks(const LoadedPlugin& plugin) {
  const std::pair<BackendCapability, const char*> features[] = {
      {BackendCapability::kAbort,
       "abort (a collective blocked on a lost peer ends only at --backend-timeout)"},
      {BackendCapability::kReduceScatter, "reduce_scatter (made of allreduce, at its traffic)"},
      {BackendCapability::kSendReceive, "send_receive (one rank's bytes go by an allgather)"}};
  std::string lacks;
  for (const auto& [capability, what] : features) {
    if (!plugin.backend->Has(capability)) lacks += std::string(lacks.empty() ? "" : ", ") + what;
  }
  return lacks;
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
  for (const auto& plugin : discovery.plugins) {
    if (plugin.kind != DPL_PLUGIN_KIND_BACKEND || plugin.backend == nullptr) continue;
    const std::string lacks = BackendLacks(plugin);
    if (!lacks.empty()) {
      text << "backend " << plugin.name << " (ABI v" << plugin.abi_version << ") lacks " << lacks
           << "\n";
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

std::string SupportedAbiText() {
  std::string text;
  for (dpl_plugin_kind kind :
       {DPL_PLUGIN_KIND_BACKEND, DPL_PLUGIN_KIND_MODEL, DPL_PLUGIN_KIND_DATASET}) {
    text += (text.empty() ? "" : ", ") + std::string(KindWord(kind)) + " ABI " +
            SupportedVersionsText(kind);
  }
  return text;
}

}  // namespace dpl::plugin_host
