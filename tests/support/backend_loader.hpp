// Loads a backend plugin the way the host does: dlopen the built .so and look up the entry table.
#pragma once

#include <dlfcn.h>

#include <cstring>
#include <string>

#include "dpl/backend_v5.h"

namespace dpl::testing {

inline std::string plugin_path(const std::string& backend, const std::string& plugin_dir) {
  return plugin_dir + "/libdpl_backend_" + backend + ".so";
}

// Returns the plugin's table of backend ABI v5 (gloo's and nccl's), or its table of v4 (tcp's)
// as a v5 table whose send_receive is NULL (v4's entries are v5's first ones, in their order);
// nullptr with *error set where it has neither. The library stays loaded, and so does the copy.
inline const dpl_backend_plugin_v5* load_backend(const std::string& path, std::string* error) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *error = ::dlerror();
    return nullptr;
  }
  if (void* v5 = ::dlsym(library, "dpl_backend_plugin_v5")) {
    return static_cast<const dpl_backend_plugin_v5*>(v5);
  }
  void* v4 = ::dlsym(library, "dpl_backend_plugin_v4");
  if (v4 == nullptr) {
    *error = "no dpl_backend_plugin_v5 or dpl_backend_plugin_v4 in " + path;
    return nullptr;
  }
  auto* table = new dpl_backend_plugin_v5{};
  std::memcpy(static_cast<void*>(table), v4, sizeof(dpl_backend_plugin_v4));
  return table;
}

}  // namespace dpl::testing
