// Loads a backend plugin the way the host does: dlopen the built .so and look up the entry table.
#pragma once

#include <dlfcn.h>

#include <string>

#include "dpl/backend_v2.h"

namespace dpl::testing {

inline std::string plugin_path(const std::string& backend, const std::string& plugin_dir) {
  return plugin_dir + "/libdpl_backend_" + backend + ".so";
}

// The plugin's version-2 table, or nullptr (with *error set) when it exports none. The library
// stays loaded.
inline const dpl_backend_plugin_v2* load_backend_v2(const std::string& path, std::string* error) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *error = ::dlerror();
    return nullptr;
  }
  void* symbol = ::dlsym(library, "dpl_backend_plugin_v2");
  if (symbol == nullptr) {
    *error = "no dpl_backend_plugin_v2 in " + path;
    return nullptr;
  }
  return static_cast<const dpl_backend_plugin_v2*>(symbol);
}

// Returns the version-1 functions or nullptr (with *error set to dlerror's text). A version-2
// plugin is seen through a copy of the functions it shares with version 1 (its header keeps
// abi_version 2; synchronize is then the caller's to look up with load_backend_v2). The library
// stays loaded.
inline const dpl_backend_plugin_v1* load_backend(const std::string& path, std::string* error) {
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *error = ::dlerror();
    return nullptr;
  }
  if (void* symbol = ::dlsym(library, "dpl_backend_plugin_v1")) {
    return static_cast<const dpl_backend_plugin_v1*>(symbol);
  }
  if (void* symbol = ::dlsym(library, "dpl_backend_plugin_v2")) {
    const auto* v2 = static_cast<const dpl_backend_plugin_v2*>(symbol);
    // Kept for the life of the process, like the library.
    return new dpl_backend_plugin_v1{v2->header,    v2->create,    v2->destroy, v2->allreduce,
                                     v2->broadcast, v2->allgather, v2->barrier, v2->last_error};
  }
  *error = "no dpl_backend_plugin_v1 or dpl_backend_plugin_v2 in " + path;
  return nullptr;
}

}  // namespace dpl::testing
