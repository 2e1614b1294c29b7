// Loading and checking one plugin file (plugin_file.cpp), for the rest of the plugin host.
#pragma once

#include <string>

#include "plugin_host/plugin_host.hpp"

namespace dpl::plugin_host {

// "backend", "model", "dataset" or "unknown".
const char* KindWord(uint32_t kind);

// Loads one file; a refusal's reason does not name the path (the caller adds it).
Result<LoadedPlugin> LoadWithoutPath(const std::string& path);

}  // namespace dpl::plugin_host
