#include "common/plugin_status.hpp"

namespace dpl {

const char* StatusName(dpl_status status) {
  switch (status) {
    case DPL_OK:
      return "DPL_OK";
    case DPL_ERR_INVALID_ARGUMENT:
      return "DPL_ERR_INVALID_ARGUMENT";
    case DPL_ERR_UNSUPPORTED:
      return "DPL_ERR_UNSUPPORTED";
    case DPL_ERR_TIMEOUT:
      return "DPL_ERR_TIMEOUT";
    case DPL_ERR_COMMUNICATION:
      return "DPL_ERR_COMMUNICATION";
    case DPL_ERR_NO_DEVICE:
      return "DPL_ERR_NO_DEVICE";
    case DPL_ERR_IO:
      return "DPL_ERR_IO";
    case DPL_ERR_BUFFER_TOO_SMALL:
      return "DPL_ERR_BUFFER_TOO_SMALL";
    case DPL_ERR_NOT_FOUND:
      return "DPL_ERR_NOT_FOUND";
    case DPL_ERR_INTERNAL:
      return "DPL_ERR_INTERNAL";
  }
  return "unknown dpl_status";
}

Status PluginCallFailure(const PluginLabel& plugin, const std::string& function, dpl_status status,
                         const char* last_error) {
  if (status == DPL_OK) return Status::Ok();
  std::string text = plugin.kind + " plugin '" + plugin.name + "'";
  if (!plugin.path.empty()) text += " (" + plugin.path + ")";
  text += " " + function + " failed with " + StatusName(status);
  if (last_error != nullptr && last_error[0] != '\0') text += ": " + std::string(last_error);
  return Status::Error(status, text);
}

}  // namespace dpl
