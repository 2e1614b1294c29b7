// The plugin host: finds plugin shared libraries on the search path, checks that each really is a
// dpl plugin of an ABI version this launcher supports, and hands out their C tables. Boost.DLL
// does the loading; no C++ type crosses into a plugin.
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
#include "dpl/backend.h"
#include "dpl/dataset.h"
#include "dpl/model.h"

namespace dpl::plugin_host {

// The ABI versions this host understands, per kind.
inline constexpr uint32_t kBackendAbiMin = 1, kBackendAbiMax = 2;
inline constexpr uint32_t kModelAbiMin = 1, kModelAbiMax = 3;
inline constexpr uint32_t kDatasetAbiMin = 1, kDatasetAbiMax = 1;

// One loaded plugin library. Keeps the library mapped while alive; tables point into it. Of the
// table pointers, those of the plugin's kind and ABI version are set.
struct LoadedPlugin {
  std::string path;
  dpl_plugin_kind kind;
  uint32_t abi_version;
  std::string name;
  std::string version;
  std::string description;
  const dpl_backend_plugin_v1* backend_v1 = nullptr;  // a backend of ABI v1
  const dpl_backend_plugin_v2* backend_v2 = nullptr;  // a backend of ABI v2
  // A model of ABI v1 or v2, in the v2 layout: a v1 table is adapted (Note [Adapting model ABI
  // v1]), its v2-only functions NULL.
  const dpl_model_plugin_v2* model = nullptr;
  const dpl_model_plugin_v3* model_v3 = nullptr;  // a model of ABI v3
  const dpl_dataset_plugin_v1* dataset = nullptr;
  std::shared_ptr<const dpl_model_plugin_v2> adapted_model;  // owns `model` for a v1 plugin
  std::shared_ptr<void> library;                             // opaque owner of the mapped library
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
