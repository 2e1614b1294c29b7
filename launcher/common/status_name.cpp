#include "common/status_name.hpp"

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

}  // namespace dpl
