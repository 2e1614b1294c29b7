// Helpers shared by the backend plugins. Everything here stays inside one plugin (hidden
// visibility, static library): nothing of it crosses the plugin's C ABI.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "dpl/backend_v1.h"

namespace dpl::plugin {

// Thrown inside a plugin to leave a call with a specific status; `guarded` turns it into the
// status return and the thread-local message. Never escapes an exported function.
class PluginError : public std::runtime_error {
 public:
  PluginError(dpl_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  dpl_status status() const noexcept { return status_; }

 private:
  dpl_status status_;
};

// Records `message` as this thread's last error and returns `status` (for `return fail(...)`).
dpl_status fail(dpl_status status, const std::string& message);
// Clears the thread's last error (called at the start of each exported call).
void clear_error();
// The thread's last error message; "" if none. Valid until the next call on this thread.
const char* last_error();

// Runs `body` (returning dpl_status) and converts any exception into a status plus message
// prefixed with `backend_name`, so no exception crosses the C ABI.
template <typename Body>
dpl_status guarded(const char* backend_name, Body&& body) noexcept {
  try {
    clear_error();
    return body();
  } catch (const PluginError& error) {
    return fail(error.status(), std::string(backend_name) + ": " + error.what());
  } catch (const std::bad_alloc&) {
    return fail(DPL_ERR_INTERNAL, std::string(backend_name) + ": out of memory");
  } catch (const std::exception& error) {
    return fail(DPL_ERR_COMMUNICATION, std::string(backend_name) + ": " + error.what());
  } catch (...) {
    return fail(DPL_ERR_INTERNAL, std::string(backend_name) + ": unknown exception");
  }
}

// Parses "key=value,key=value" (empty string = no options). Throws PluginError
// (DPL_ERR_INVALID_ARGUMENT) on a malformed entry or a key not in `allowed_keys`, naming the
// allowed keys.
std::map<std::string, std::string> parse_options(const char* options,
                                                 const std::vector<std::string>& allowed_keys);

// Element types the backends reduce. kUnknown for anything else.
enum class ElementType {
  kUnknown,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt32,
  kInt64,
  kUInt8,
  kInt8
};

ElementType element_type(const DLDataType& dtype);
// Human name of a DLPack dtype, e.g. "float32", "int64", "complex64", for messages.
std::string dtype_name(const DLDataType& dtype);
const char* op_name(dpl_reduce_op op);

// Number of elements of a tensor (product of its shape; 1 for 0-d).
int64_t numel(const DLTensor& tensor);
// Bytes per element (bits rounded up, times lanes).
size_t element_size(const DLDataType& dtype);
// Throws PluginError(INVALID_ARGUMENT) unless the tensor is dense row-major and has data when
// non-empty; `what` names the argument in the message.
void check_contiguous(const DLTensor& tensor, const char* what);
// Throws PluginError(UNSUPPORTED) unless the tensor lives in host memory.
void check_cpu(const DLTensor& tensor, const char* backend_name, const char* what);
// Checks the tensors of a CPU allgather (contiguous, host memory, output = world_size x input) and
// returns the bytes of one rank's block. Throws PluginError naming what is wrong.
size_t check_cpu_allgather(const DLTensor& input, const DLTensor& output, int32_t world_size,
                           const char* backend_name);
// Checks the tensor and root of a CPU broadcast and returns the tensor's bytes. Throws PluginError
// naming what is wrong.
size_t check_cpu_broadcast(const DLTensor& tensor, int32_t root, int32_t world_size,
                           const char* backend_name);
// The first byte of the tensor's data (data + byte_offset).
inline void* data_pointer(const DLTensor& tensor) {
  return static_cast<char*>(tensor.data) + tensor.byte_offset;
}

// Validates a backend config common to all backends (sizes, rank range, store, timeout).
void check_config(const dpl_backend_config_v1* config);

// Sends a log line through the host callback if there is one.
void log(const dpl_backend_config_v1& config, dpl_log_level level, const std::string& message);

}  // namespace dpl::plugin
