// The nccl backend's checks of what it is handed, without CUDA or NCCL: device tensors against
// the backend's device, and the NCCL unique id exchanged through the job's store. Failures throw
// dpl::support::PluginError.
#ifndef DPL_PLUGINS_NCCL_SETUP_CHECKS_HPP
#define DPL_PLUGINS_NCCL_SETUP_CHECKS_HPP

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "dpl/store.h"

namespace dpl::nccl {

// NCCL_UNIQUE_ID_BYTES: the size of an ncclUniqueId (the plugin checks that nccl.h agrees).
constexpr size_t kUniqueIdBytes = 128;
// The store key rank 0 publishes the unique id under (the host namespaces keys per instance).
constexpr const char* kUniqueIdKey = "nccl/unique_id";

// Refuses a tensor that is not dense (DPL_ERR_INVALID_ARGUMENT), not in CUDA memory
// (DPL_ERR_UNSUPPORTED) or on another device than `device_id`, the backend's
// (DPL_ERR_INVALID_ARGUMENT). `what` names it: "allreduce tensor".
void CheckDeviceTensor(const DLTensor& tensor, int32_t device_id, const std::string& what);

// Rank 0: publishes the id. Store failures are DPL_ERR_COMMUNICATION.
void PublishUniqueId(const dpl_store_v1& store, const void* id, size_t bytes);

// Other ranks: waits at most timeout_ms for rank 0's id and copies it into `id` (`bytes` long).
// A value of any other size is refused (DPL_ERR_COMMUNICATION), the wait running out is
// DPL_ERR_TIMEOUT.
void ReadUniqueId(const dpl_store_v1& store, int64_t timeout_ms, void* id, size_t bytes);

}  // namespace dpl::nccl

#endif  // DPL_PLUGINS_NCCL_SETUP_CHECKS_HPP
