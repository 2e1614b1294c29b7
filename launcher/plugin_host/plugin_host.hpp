// The plugin host: finds plugin shared libraries on the search path, checks that each really is a
// dpl plugin of an ABI version this launcher supports (the adapter registry's), and hands out each
// one's table as the one interface of its kind. Boost.DLL does the loading; no C++ type crosses
// into a plugin.
//
// Search path, in order: every --plugin-dir, then DPL_PLUGIN_PATH (colon-separated), then the
// install's plugin folder (<prefix>/lib/dpl/plugins, found relative to the launcher binary), then
// the build tree's plugin folder when the launcher runs from a build tree.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/plugin_status.hpp"
#include "common/status.hpp"
#include "plugin_host/backend_interface.hpp"
#include "plugin_host/dataset_interface.hpp"
#include "plugin_host/model_interface.hpp"

namespace dpl::plugin_host {

// One loaded plugin library. Keeps the library mapped while alive. The plugin's table is handed
// out as the one interface of its kind (the adapter of its ABI version made it: Note [Capabilities,
// not versions]); exactly the one of the plugin's kind is set, and it keeps the library mapped too.
struct LoadedPlugin {
  std::string path;
  dpl_plugin_kind kind;
  uint32_t abi_version;  // for `launcher plugins`; the host asks the interface's capabilities
  std::string name;
  std::string version;
  std::string description;
  std::shared_ptr<const BackendInterface> backend;
  std::shared_ptr<const ModelInterface> model;
  std::shared_ptr<const DatasetInterface> dataset;
  std::shared_ptr<void> library;  // opaque owner of the mapped library
};

// The entries of a kind's newest table the host requires, by name: every one must be used by the
// host (tests/abi_coverage runs the launcher through recording plugins and checks it).
std::vector<std::string> RequiredFunctions(dpl_plugin_kind kind);

// A file on the search path that is not a usable plugin, with the exact reason.
struct RefusedPlugin {
  std::string path;
  std::string reason;
};

struct Discovery {
  std::vector<LoadedPlugin> plugins;  // the usable ones, in search-path order
  std::vector<RefusedPlugin> refused;
  std::vector<std::string> search_path;  // the folders actually searched
};

// Loads one file. The error says why it is refused: not a shared library (with dlopen's text),
// no dpl entry symbol, bad magic, kind mismatch, ABI version newer/older than supported (both
// numbers).
Result<LoadedPlugin> LoadPluginFile(const std::string& path);

// The ordered search path for these --plugin-dir values (environment and install folder added).
std::vector<std::string> PluginSearchPath(const std::vector<std::string>& plugin_dirs);

// Loads every *.so in the search path. Two plugins of the same kind and name are an error
// naming both paths.
Result<Discovery> DiscoverPlugins(const std::vector<std::string>& plugin_dirs);

// Picks the plugin of `kind` named `name`; the error lists the names that exist, and the
// refused files (a plugin the user meant may be among them, with its reason).
Result<LoadedPlugin> FindPlugin(const Discovery& discovery, dpl_plugin_kind kind,
                                const std::string& name);

// Text of `launcher plugins`: kind, name, version, ABI version, path per plugin, then refusals.
std::string FormatPluginList(const Discovery& discovery);

// The ABI versions this launcher loads, for `launcher --version`: "backend ABI v1..v5, model ABI
// v1..v4, dataset ABI v1..v2".
std::string SupportedAbiText();

// Picks the backend for --backend `requested` on `device` (cpu|cuda). For "auto": nccl when the
// device is cuda and the nccl plugin is present, else gloo, else tcp. Any other name is looked up
// as FindPlugin does. `reason` (may be NULL) receives one line saying which and why, for the log.
Result<LoadedPlugin> ChooseBackend(const Discovery& discovery, const std::string& requested,
                                   const std::string& device, std::string* reason);

// The enum name of a dpl_status, e.g. "DPL_ERR_NO_DEVICE".
using ::dpl::StatusName;

// How messages name this plugin: its kind, name and path.
PluginLabel LabelOf(const LoadedPlugin& plugin);

// The error for a failed plugin call (create, train_step, ...): names the plugin, its path, the
// function and the status, and appends the plugin's last_error() text. Ok for DPL_OK. Call it on
// the thread that made the failed call (last_error is per thread).
Status DescribeCallFailure(const LoadedPlugin& plugin, const std::string& function,
                           dpl_status status);

// The build tree's plugin folder (main passes its DPL_BUILD_PLUGIN_DIR). It is searched last, and
// only when the running executable lives in that build tree and no install folder exists next to
// it, so an installed launcher never also finds the build tree's copies.
void SetBuildTreePluginDir(const std::string& dir);

}  // namespace dpl::plugin_host
