// The nccl backend: one NCCL communicator per instance, unique id exchanged through the store.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "dpl/support/backend.hpp"
#include "dpl/support/options.hpp"

namespace {

using dpl::support::ElementType;
using dpl::support::PluginError;

constexpr const char* kBackendName = "nccl";
constexpr const char* kUniqueIdKey = "nccl/unique_id";

void check_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw PluginError(DPL_ERR_INTERNAL, std::string(what) + ": " + cudaGetErrorString(error));
  }
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    const dpl_status status = result == ncclSystemError || result == ncclRemoteError
                                  ? DPL_ERR_COMMUNICATION
                                  : DPL_ERR_INTERNAL;
    throw PluginError(status, std::string(what) + ": " + ncclGetErrorString(result));
  }
}

bool nccl_type(ElementType type, ncclDataType_t* out) {
  switch (type) {
    case ElementType::kFloat16:
      *out = ncclFloat16;
      return true;
    case ElementType::kFloat32:
      *out = ncclFloat32;
      return true;
    case ElementType::kFloat64:
      *out = ncclFloat64;
      return true;
    case ElementType::kInt8:
      *out = ncclInt8;
      return true;
    case ElementType::kUInt8:
      *out = ncclUint8;
      return true;
    case ElementType::kInt32:
      *out = ncclInt32;
      return true;
    case ElementType::kInt64:
      *out = ncclInt64;
      return true;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 21000
    case ElementType::kBFloat16:
      *out = ncclBfloat16;
      return true;
#endif
    default:
      return false;
  }
}

void check_cuda_tensor(const DLTensor& tensor, const char* what) {
  dpl::support::CheckContiguous(tensor, what);
  if (tensor.device.device_type != kDLCUDA) {
    throw PluginError(DPL_ERR_UNSUPPORTED, std::string(what) +
                                               " is not a CUDA tensor; the nccl backend moves "
                                               "kDLCUDA tensors only (use --backend gloo for CPU)");
  }
}

class NcclBackend {
 public:
  explicit NcclBackend(const dpl_backend_config_v2& config) : config_(config) {
    dpl::support::KeyValueOptions(config.options, "--backend-options").CheckAllKnown();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      throw PluginError(DPL_ERR_NO_DEVICE,
                        "NCCL needs a CUDA device; none found; use --backend gloo");
    }
    if (config.device_id < 0 || config.device_id >= devices) {
      throw PluginError(DPL_ERR_NO_DEVICE, "CUDA device " + std::to_string(config.device_id) +
                                               " does not exist (this machine has " +
                                               std::to_string(devices) + ")");
    }
    check_cuda(cudaSetDevice(config.device_id), "cudaSetDevice");
    ncclUniqueId id;
    const dpl_store_v1* store = config.store;
    if (config.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      check_store(store->set(store->context, kUniqueIdKey, &id, sizeof(id)));
    } else {
      uint64_t size = 0;
      check_store(
          store->get(store->context, kUniqueIdKey, &id, sizeof(id), &size, config.timeout_ms));
    }
    check_nccl(ncclCommInitRank(&comm_, config.world_size, id, config.rank), "ncclCommInitRank");
  }
  ~NcclBackend() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }

  dpl_status allreduce(DLTensor* tensor, dpl_reduce_op op, cudaStream_t stream) {
    check_cuda_tensor(*tensor, "allreduce tensor");
    use_device();
    ncclDataType_t type;
    if (!nccl_type(dpl::support::ElementTypeOf(tensor->dtype), &type)) {
      return dpl::support::Fail(DPL_ERR_UNSUPPORTED, "allreduce does not support dtype " +
                                                         dpl::support::DtypeName(tensor->dtype));
    }
    ncclRedOp_t nccl_op;
    switch (op) {
      case DPL_REDUCE_SUM:
        nccl_op = ncclSum;
        break;
      case DPL_REDUCE_AVG:
        nccl_op = ncclAvg;
        break;
      case DPL_REDUCE_MIN:
        nccl_op = ncclMin;
        break;
      case DPL_REDUCE_MAX:
        nccl_op = ncclMax;
        break;
      default:
        return dpl::support::Fail(DPL_ERR_UNSUPPORTED,
                                  "allreduce does not support op " + std::to_string(op));
    }
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*tensor));
    if (count == 0) return DPL_OK;
    void* data = dpl::support::DataPointer(*tensor);
    check_nccl(ncclAllReduce(data, data, count, type, nccl_op, comm_, stream), "ncclAllReduce");
    return DPL_OK;
  }

  dpl_status broadcast(DLTensor* tensor, int32_t root, cudaStream_t stream) {
    check_cuda_tensor(*tensor, "broadcast tensor");
    use_device();
    if (root < 0 || root >= config_.world_size) {
      return dpl::support::Fail(DPL_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                                              " is outside world size " +
                                                              std::to_string(config_.world_size));
    }
    const size_t bytes = static_cast<size_t>(dpl::support::ElementCount(*tensor)) *
                         dpl::support::ElementSize(tensor->dtype);
    if (bytes == 0) return DPL_OK;
    void* data = dpl::support::DataPointer(*tensor);
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream), "ncclBroadcast");
    return DPL_OK;
  }

  dpl_status allgather(const DLTensor* input, DLTensor* output, cudaStream_t stream) {
    check_cuda_tensor(*input, "allgather input");
    check_cuda_tensor(*output, "allgather output");
    use_device();
    const size_t block = static_cast<size_t>(dpl::support::ElementCount(*input)) *
                         dpl::support::ElementSize(input->dtype);
    const size_t out_bytes = static_cast<size_t>(dpl::support::ElementCount(*output)) *
                             dpl::support::ElementSize(output->dtype);
    if (out_bytes != block * static_cast<size_t>(config_.world_size)) {
      return dpl::support::Fail(DPL_ERR_INVALID_ARGUMENT,
                                "allgather output holds " + std::to_string(out_bytes) +
                                    " bytes but needs world_size * input = " +
                                    std::to_string(block * config_.world_size));
    }
    if (block == 0) return DPL_OK;
    check_nccl(ncclAllGather(dpl::support::DataPointer(*input), dpl::support::DataPointer(*output),
                             block, ncclUint8, comm_, stream),
               "ncclAllGather");
    return DPL_OK;
  }

  dpl_status barrier() {
    // NCCL has no barrier: a one-element allreduce on a private stream, waited for.
    use_device();
    int32_t* token = nullptr;
    check_cuda(cudaMalloc(&token, sizeof(int32_t)), "cudaMalloc");
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    const ncclResult_t result = ncclAllReduce(token, token, 1, ncclInt32, ncclSum, comm_, stream);
    const cudaError_t done = cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    cudaFree(token);
    check_nccl(result, "ncclAllReduce (barrier)");
    check_cuda(done, "cudaStreamSynchronize (barrier)");
    return DPL_OK;
  }

 private:
  // The current device is per thread, and the host calls collectives from its own communication
  // thread, not the one that created the communicator: a NULL stream means this device's.
  void use_device() const { check_cuda(cudaSetDevice(config_.device_id), "cudaSetDevice"); }

  void check_store(dpl_status status) {
    if (status == DPL_OK) return;
    const char* message = config_.store->last_error(config_.store->context);
    throw PluginError(
        status == DPL_ERR_TIMEOUT ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION,
        std::string("store: cannot exchange the NCCL unique id: ") + (message ? message : ""));
  }

  dpl_backend_config_v2 config_;
  ncclComm_t comm_ = nullptr;
};

NcclBackend* as_nccl(dpl_backend* backend) {
  return reinterpret_cast<NcclBackend*>(backend);
}

dpl_status nccl_create(const dpl_backend_config_v2* config, dpl_backend** out) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(out != nullptr, "out is NULL");
    *out = nullptr;
    dpl::support::CheckBackendConfig(config);
    *out = reinterpret_cast<dpl_backend*>(new NcclBackend(*config));
    return DPL_OK;
  });
}

void nccl_destroy(dpl_backend* backend) {
  dpl::support::Guarded(kBackendName, [&] {
    delete as_nccl(backend);
    return DPL_OK;
  });
}

dpl_status nccl_allreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(backend != nullptr && tensor != nullptr, "backend or tensor is NULL");
    return as_nccl(backend)->allreduce(tensor, op, static_cast<cudaStream_t>(stream));
  });
}

dpl_status nccl_broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(backend != nullptr && tensor != nullptr, "backend or tensor is NULL");
    return as_nccl(backend)->broadcast(tensor, root, static_cast<cudaStream_t>(stream));
  });
}

dpl_status nccl_allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(backend != nullptr && input != nullptr && output != nullptr,
                          "backend, input or output is NULL");
    return as_nccl(backend)->allgather(input, output, static_cast<cudaStream_t>(stream));
  });
}

dpl_status nccl_barrier(dpl_backend* backend) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(backend != nullptr, "backend is NULL");
    return as_nccl(backend)->barrier();
  });
}

// The collectives run on the caller's stream: once that stream's work is done, so are they.
dpl_status nccl_synchronize(dpl_backend* backend, void* stream) {
  return dpl::support::Guarded(kBackendName, [&] {
    dpl::support::Require(backend != nullptr, "backend is NULL");
    check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
    return DPL_OK;
  });
}

const char* nccl_last_error() {
  return dpl::support::LastError();
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_backend_plugin_v2 dpl_nccl_backend_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v2);
extern "C" const dpl_backend_plugin_v2 dpl_nccl_backend_table = {
    {sizeof(dpl_backend_plugin_v2), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_2, "nccl", "1.0.0", "NVIDIA NCCL collectives (CUDA tensors)"},
    nccl_create,
    nccl_destroy,
    nccl_allreduce,
    nccl_broadcast,
    nccl_allgather,
    nccl_barrier,
    nccl_last_error,
    nccl_synchronize,
};
