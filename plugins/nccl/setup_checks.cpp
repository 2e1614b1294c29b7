// The nccl backend's checks of tensors and of the unique id (see setup_checks.hpp).
#include "setup_checks.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "dpl/support/error.hpp"
#include "dpl/support/tensor.hpp"

namespace dpl::nccl {

using support::PluginError;

namespace {

std::string StoreError(const dpl_store_v1& store) {
  const char* message = store.last_error != nullptr ? store.last_error(store.context) : nullptr;
  return message != nullptr && message[0] != '\0' ? message : "no message from the store";
}

}  // namespace

void CheckDeviceTensor(const DLTensor& tensor, int32_t device_id, const std::string& what) {
  support::CheckContiguous(tensor, what);
  if (tensor.device.device_type != kDLCUDA) {
    throw PluginError(DPL_ERR_UNSUPPORTED, what +
                                               " is not a CUDA tensor; the nccl backend moves "
                                               "kDLCUDA tensors only (use --backend gloo for CPU)");
  }
  if (tensor.device.device_id != device_id) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + " is on CUDA device " + std::to_string(tensor.device.device_id) +
                          " but this nccl backend runs on device " + std::to_string(device_id) +
                          " (its config's device_id); pass the tensors of the rank's own device");
  }
}

void PublishUniqueId(const dpl_store_v1& store, const void* id, size_t bytes) {
  if (store.set(store.context, kUniqueIdKey, id, bytes) != DPL_OK) {
    throw PluginError(DPL_ERR_COMMUNICATION, std::string("cannot publish the NCCL unique id under "
                                                         "the store key ") +
                                                 kUniqueIdKey + ": " + StoreError(store));
  }
}

void ReadUniqueId(const dpl_store_v1& store, int64_t timeout_ms, void* id, size_t bytes) {
  // One byte more than an id, so that a longer value is reported with its size, not truncated.
  std::vector<unsigned char> buffer(bytes + 1);
  uint64_t size = 0;
  const dpl_status status =
      store.get(store.context, kUniqueIdKey, buffer.data(), buffer.size(), &size, timeout_ms);
  if (status == DPL_ERR_TIMEOUT) {
    throw PluginError(DPL_ERR_TIMEOUT, "no NCCL unique id from rank 0 under the store key " +
                                           std::string(kUniqueIdKey) + " within " +
                                           std::to_string(timeout_ms) +
                                           " ms (--backend-timeout): rank 0's nccl backend did "
                                           "not start (see its log)");
  }
  if (status != DPL_OK && status != DPL_ERR_BUFFER_TOO_SMALL) {
    throw PluginError(DPL_ERR_COMMUNICATION, "cannot read the NCCL unique id under the store key " +
                                                 std::string(kUniqueIdKey) + ": " +
                                                 StoreError(store));
  }
  if (size != bytes) {
    throw PluginError(DPL_ERR_COMMUNICATION,
                      "the store key " + std::string(kUniqueIdKey) + " holds " +
                          std::to_string(size) + " bytes, not the " + std::to_string(bytes) +
                          " of an NCCL unique id: it was not written by this job's rank 0 nccl "
                          "backend (another dpl version, or another job on the same store)");
  }
  std::copy(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(bytes),
            static_cast<unsigned char*>(id));
}

}  // namespace dpl::nccl
