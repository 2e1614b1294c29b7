// dpl SDK, C++ plugin support: checks every backend makes on its config and on host tensors.
// Failed checks throw PluginError (dpl/support/error.hpp).
#ifndef DPL_SUPPORT_BACKEND_HPP
#define DPL_SUPPORT_BACKEND_HPP

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/backend_v2.h"
#include "dpl/support/error.hpp"
#include "dpl/support/tensor.hpp"

namespace dpl::support {

// Refuses a config that is NULL, smaller than `Config` (dpl_backend_config_v1 or _v2: the one
// the plugin's ABI version passes), has its rank outside the world, a timeout <= 0 or no store.
template <typename Config>
void CheckBackendConfig(const Config* config) {
  Require(config != nullptr, "config is NULL");
  Require(config->struct_size >= sizeof(Config),
          "config struct_size " + std::to_string(config->struct_size) + " is smaller than the " +
              std::to_string(sizeof(Config)) + " bytes of this plugin's backend ABI");
  Require(config->world_size >= 1 && config->rank >= 0 && config->rank < config->world_size,
          "rank " + std::to_string(config->rank) + " is outside world size " +
              std::to_string(config->world_size));
  Require(config->timeout_ms > 0, "timeout_ms must be > 0");
  Require(config->store != nullptr, "config has no store");
}

// Refuses a tensor that is not in host memory (DPL_ERR_UNSUPPORTED), naming the backend.
inline void CheckHostTensor(const DLTensor& tensor, const std::string& backend_name,
                            const std::string& what) {
  if (!InHostMemory(tensor.device)) {
    throw PluginError(DPL_ERR_UNSUPPORTED, what + " is on device type " +
                                               std::to_string(tensor.device.device_type) +
                                               " but the " + backend_name +
                                               " backend only moves CPU tensors; use --backend "
                                               "nccl for CUDA tensors");
  }
}

// Checks a host broadcast's tensor and root; returns the tensor's bytes.
inline size_t CheckHostBroadcast(const DLTensor& tensor, int32_t root, int32_t world_size,
                                 const std::string& backend_name) {
  CheckContiguous(tensor, "broadcast tensor");
  CheckHostTensor(tensor, backend_name, "broadcast tensor");
  Require(root >= 0 && root < world_size, "broadcast root " + std::to_string(root) +
                                              " is outside world size " +
                                              std::to_string(world_size));
  return ByteCount(tensor);
}

// Checks an allgather's tensors (output = world_size x input); returns one rank's block bytes.
inline size_t CheckAllgatherSizes(const DLTensor& input, const DLTensor& output,
                                  int32_t world_size) {
  CheckContiguous(input, "allgather input");
  CheckContiguous(output, "allgather output");
  const size_t block = ByteCount(input);
  const size_t out_bytes = ByteCount(output);
  Require(out_bytes == block * static_cast<size_t>(world_size),
          "allgather output holds " + std::to_string(out_bytes) +
              " bytes but needs world_size * input = " +
              std::to_string(block * static_cast<size_t>(world_size)));
  return block;
}

inline size_t CheckHostAllgather(const DLTensor& input, const DLTensor& output, int32_t world_size,
                                 const std::string& backend_name) {
  CheckHostTensor(input, backend_name, "allgather input");
  CheckHostTensor(output, backend_name, "allgather output");
  return CheckAllgatherSizes(input, output, world_size);
}

// Sends a line through the host's log callback, if it gave one.
template <typename Config>
void Log(const Config& config, dpl_log_level level, const std::string& message) {
  if (config.log != nullptr) config.log(config.log_context, level, message.c_str());
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_BACKEND_HPP
