// SDK status codes in messages: the enum name of a dpl_status, and the one message for a plugin
// call that failed ("backend plugin 'tcp' (/path/libdpl_backend_tcp.so) allreduce failed with
// DPL_ERR_TIMEOUT: <the plugin's last_error>"), which keeps the plugin's code.
#pragma once

#include <string>

#include "common/status.hpp"
#include "dpl/common.h"

namespace dpl {

const char* StatusName(dpl_status status);

// Who made a failed call, for PluginCallFailure: the kind word ("backend", "model"), the name
// the plugin gives itself, and the file it was loaded from ("" when not known).
struct PluginLabel {
  std::string kind;
  std::string name;
  std::string path;
};

// Ok for DPL_OK; else a Status with `status` as its code that names the plugin, the function and
// the status, followed by `last_error` when the plugin left one (read it on the calling thread,
// right after the call: it is per thread).
Status PluginCallFailure(const PluginLabel& plugin, const std::string& function, dpl_status status,
                         const char* last_error);

}  // namespace dpl
