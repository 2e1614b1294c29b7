// dpl SDK, C++ plugin support: checks every backend makes on its config and on host tensors.
// Failed checks throw PluginError (dpl/support/error.hpp).
#ifndef DPL_SUPPORT_BACKEND_HPP
#define DPL_SUPPORT_BACKEND_HPP

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/backend_v3.h"
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

// Refuses the stream of a collective of a host backend: it must be NULL for CPU tensors
// (dpl/backend_v1.h).
inline void CheckNoStream(void* stream) {
  if (stream != nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "stream must be NULL for CPU tensors");
  }
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

// Whether the data of two compact tensors shares a byte.
inline bool Overlap(const DLTensor& a, const DLTensor& b) {
  const auto* a_first = static_cast<const char*>(DataPointer(a));
  const auto* b_first = static_cast<const char*>(DataPointer(b));
  return ByteCount(a) > 0 && ByteCount(b) > 0 && a_first < b_first + ByteCount(b) &&
         b_first < a_first + ByteCount(a);
}

// Whether `part` is exactly slice `rank` of `whole` (world_size equal slices, dpl/backend_v3.h).
inline bool IsSliceOf(const DLTensor& part, const DLTensor& whole, int32_t rank) {
  const size_t bytes = ByteCount(part);
  return DataPointer(part) ==
         static_cast<const void*>(static_cast<const char*>(DataPointer(whole)) +
                                  static_cast<size_t>(rank) * bytes);
}

// Checks a reduce_scatter's tensors (dpl/backend_v3.h): compact, one dtype, input = world_size x
// output. Returns whether it runs in place (output is slice `rank` of input); any other overlap
// is refused.
inline bool CheckReduceScatter(const DLTensor& input, const DLTensor& output, int32_t world_size,
                               int32_t rank) {
  CheckContiguous(input, "reduce_scatter input");
  CheckContiguous(output, "reduce_scatter output");
  Require(input.dtype.code == output.dtype.code && input.dtype.bits == output.dtype.bits &&
              input.dtype.lanes == output.dtype.lanes,
          "reduce_scatter input is " + DtypeName(input.dtype) + " but output is " +
              DtypeName(output.dtype));
  const int64_t count = ElementCount(output);
  Require(ElementCount(input) == count * world_size,
          "reduce_scatter input holds " + std::to_string(ElementCount(input)) +
              " elements but needs world_size * output = " + std::to_string(count * world_size));
  if (count > 0 && IsSliceOf(output, input, rank)) return true;
  Require(!Overlap(input, output), "reduce_scatter output overlaps its input without being slice " +
                                       std::to_string(rank) + " of it (the in-place form)");
  return false;
}

// Checks an allgather's tensors (output = world_size x input). Returns whether it runs in place
// (input is slice `rank` of output, dpl/backend_v3.h); any other overlap is refused.
inline bool CheckAllgatherPlacement(const DLTensor& input, const DLTensor& output,
                                    int32_t world_size, int32_t rank) {
  CheckAllgatherSizes(input, output, world_size);
  if (ByteCount(input) > 0 && IsSliceOf(input, output, rank)) return true;
  Require(!Overlap(input, output), "allgather input overlaps its output without being slice " +
                                       std::to_string(rank) + " of it (the in-place form)");
  return false;
}

// Checks one side of a send_receive (dpl/backend_v5.h): `tensor` NULL with `peer` -1, or a
// contiguous tensor with another rank of the world. `what` is "send" or "receive".
inline void CheckPointToPoint(const DLTensor* tensor, int32_t peer, int32_t world_size,
                              int32_t rank, const char* what) {
  const std::string side(what);
  const std::string peer_name = side == "send" ? "to" : "from";
  if (tensor == nullptr) {
    Require(peer == -1, side + " is NULL but " + peer_name + " is " + std::to_string(peer) +
                            " (give -1 where this rank has nothing to " + side + ")");
    return;
  }
  Require(peer >= 0 && peer < world_size && peer != rank,
          peer_name + " " + std::to_string(peer) + " is not another rank of world size " +
              std::to_string(world_size) + " (this is rank " + std::to_string(rank) + ")");
  CheckContiguous(*tensor, side + " tensor");
}

// Checks a send_receive's two sides and that the tensors do not overlap.
inline void CheckSendReceive(const DLTensor* send, int32_t to, const DLTensor* receive,
                             int32_t from, int32_t world_size, int32_t rank) {
  CheckPointToPoint(send, to, world_size, rank, "send");
  CheckPointToPoint(receive, from, world_size, rank, "receive");
  if (send != nullptr && receive != nullptr) {
    Require(!Overlap(*send, *receive), "send_receive's send and receive tensors overlap");
  }
}

// Sends a line through the host's log callback, if it gave one.
template <typename Config>
void Log(const Config& config, dpl_log_level level, const std::string& message) {
  if (config.log != nullptr) config.log(config.log_context, level, message.c_str());
}

}  // namespace dpl::support

#endif  // DPL_SUPPORT_BACKEND_HPP
