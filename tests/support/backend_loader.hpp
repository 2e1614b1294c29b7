// Loads a backend plugin the way the host does: dlopen the built .so and look up the entry table.
#pragma once

#include <dlfcn.h>

#include <string>

#include "dpl/backend_v4.h"

namespace dpl::testing {

inline std::string plugin_path(const std::string& backend, const std::string& plugin_dir) {
  return plugin_dir + "/libdpl_backend_" + backend + ".so";
}

// Returns the plugin's table of backend ABI v4 (every in-tree backend's) or nullptr (with *error
// set to dlerror's text). The library stays loaded.
inline const dpl_backend_plugin_v4* load_backend(const std::string& path, std::string* error) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *error = ::dlerror();
    return nullptr;
  }
  void* symbol = ::dlsym(library, "dpl_backend_plugin_v4");
  if (symbol == nullptr) {
    *error = "no dpl_backend_plugin_v4 in " + path;
    return nullptr;
  }
  return static_cast<const dpl_backend_plugin_v4*>(symbol);
}

}  // namespace dpl::testing
