// The nccl backend (backend ABI v5): one NCCL communicator per instance, its unique id exchanged
// through the store, collectives on a stream of the backend's own ordered after the caller's
// (Note [Collectives on a stream of their own]), every wait bounded by the backend timeout
// (Note [Watchdog without a thread]) and ended by abort from another thread (Note [Abort from
// another thread], all in collective_engine.hpp).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "collective_engine.hpp"
#include "cuda_device_queue.hpp"
#include "dpl/backend.h"
#include "dpl/support/backend.hpp"
#include "dpl/support/backend_table.hpp"
#include "dpl/support/options.hpp"
#include "dpl/support/reduce.hpp"
#include "nccl_communicator.hpp"
#include "setup_checks.hpp"

namespace {

using dpl::nccl::CheckCuda;
using dpl::nccl::Progress;
using dpl::support::ElementType;
using dpl::support::PluginError;

constexpr const char* kBackendName = "nccl";
static_assert(sizeof(ncclUniqueId) == dpl::nccl::kUniqueIdBytes,
              "nccl.h's ncclUniqueId is not NCCL_UNIQUE_ID_BYTES long");

#ifdef DPL_NCCL_HAS_BFLOAT16
constexpr const char* kDtypeList =
    "float16, bfloat16, float32, float64, int8, uint8, int32 or int64";
#else
constexpr const char* kDtypeList = "float16, float32, float64, int8, uint8, int32 or int64";
#endif

std::optional<ncclDataType_t> NcclType(ElementType type) {
  switch (type) {
    case ElementType::kFloat16:
      return ncclFloat16;
    case ElementType::kFloat32:
      return ncclFloat32;
    case ElementType::kFloat64:
      return ncclFloat64;
    case ElementType::kInt8:
      return ncclInt8;
    case ElementType::kUInt8:
      return ncclUint8;
    case ElementType::kInt32:
      return ncclInt32;
    case ElementType::kInt64:
      return ncclInt64;
#ifdef DPL_NCCL_HAS_BFLOAT16
    case ElementType::kBFloat16:
      return ncclBfloat16;
#endif
    default:
      return std::nullopt;
  }
}

ncclRedOp_t NcclOp(dpl_reduce_op op) {
  switch (op) {
    case DPL_REDUCE_SUM:
      return ncclSum;
    case DPL_REDUCE_AVG:
#ifdef DPL_NCCL_HAS_AVG
      return ncclAvg;
#else
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "allreduce op avg needs NCCL 2.10 or newer (built with " +
                            dpl::nccl::NcclVersionText(NCCL_VERSION_CODE) +
                            "); use sum and divide by the world size");
#endif
    case DPL_REDUCE_MIN:
      return ncclMin;
    case DPL_REDUCE_MAX:
      return ncclMax;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED, "allreduce does not support op " + std::to_string(op) +
                                             "; use sum, avg, min or max");
}

std::string Elements(const DLTensor& tensor) {
  return std::to_string(dpl::support::ElementCount(tensor)) + " " +
         dpl::support::DtypeName(tensor.dtype);
}

class NcclBackend : public dpl::support::BackendDefaults<NcclBackend> {
 public:
  static constexpr const char* kName = kBackendName;

  explicit NcclBackend(const dpl_backend_config_v3& config)
      : config_(config), timeout_(config.timeout_ms) {
    dpl::support::KeyValueOptions(config.options, "--backend-options").CheckAllKnown();
    CheckDevice();
    UseDevice();
    ncclUniqueId id;
    if (config.rank == 0) {
      CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      dpl::nccl::PublishUniqueId(*config.store, &id, sizeof(id));
    } else {
      dpl::nccl::ReadUniqueId(*config.store, config.timeout_ms, &id, sizeof(id));
    }
    queue_ = std::make_unique<dpl::nccl::CudaDeviceQueue>();
    auto log = [this](dpl_log_level level, const std::string& message) {
      dpl::support::Log(config_, level, message);
    };
    Progress started;
    communicator_ = std::make_unique<dpl::nccl::NcclCommunicator>(
        id, config.rank, config.world_size, config.device_id, timeout_, log, &started);
    engine_ = std::make_unique<dpl::nccl::CollectiveEngine>(
        communicator_.get(), queue_.get(), &waiter_,
        dpl::nccl::EngineIdentity{config.rank, config.world_size, timeout_}, log);
    try {
      engine_->AwaitReady(started);
      CheckCuda(cudaMalloc(&barrier_token_, sizeof(int32_t)), "cudaMalloc (barrier token)");
    } catch (...) {
      engine_->Shutdown();
      throw;
    }
    ncclGetVersion(&runtime_version_);
    LogVersions();
  }

  ~NcclBackend() {
    cudaSetDevice(config_.device_id);
    engine_->Shutdown();
    if (barrier_token_ != nullptr) cudaFree(barrier_token_);
  }

  void Allreduce(DLTensor* tensor, dpl_reduce_op op, void* stream) {
    engine_->CheckUsable();
    dpl::nccl::CheckDeviceTensor(*tensor, config_.device_id, "allreduce tensor");
    const ncclDataType_t type = ReducibleType(*tensor, op, "allreduce");
    const ncclRedOp_t nccl_op = NcclOp(op);
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*tensor));
    if (count == 0) return;
    UseDevice();
    void* data = dpl::support::DataPointer(*tensor);
    engine_->Issue("allreduce",
                   std::string(dpl::support::ReduceOpName(op)) + " of " + Elements(*tensor), stream,
                   [&](void* own) {
                     return communicator_->Answer(ncclAllReduce(data, data, count, type, nccl_op,
                                                                communicator_->handle(),
                                                                static_cast<cudaStream_t>(own)));
                   });
  }

  // ncclReduceScatter runs in place when the output is the rank's slice of the input, exactly
  // dpl/backend_v3.h's in-place form.
  void ReduceScatter(DLTensor* input, DLTensor* output, dpl_reduce_op op, void* stream) {
    engine_->CheckUsable();
    dpl::nccl::CheckDeviceTensor(*input, config_.device_id, "reduce_scatter input");
    dpl::nccl::CheckDeviceTensor(*output, config_.device_id, "reduce_scatter output");
    dpl::support::CheckReduceScatter(*input, *output, config_.world_size, config_.rank);
    const ncclDataType_t type = ReducibleType(*input, op, "reduce_scatter");
    const ncclRedOp_t nccl_op = NcclOp(op);
    const size_t count = static_cast<size_t>(dpl::support::ElementCount(*output));
    if (count == 0) return;
    UseDevice();
    const void* in = dpl::support::DataPointer(*input);
    void* out = dpl::support::DataPointer(*output);
    engine_->Issue(
        "reduce_scatter",
        std::string(dpl::support::ReduceOpName(op)) + " of " + Elements(*output) + " per rank",
        stream, [&](void* own) {
          return communicator_->Answer(ncclReduceScatter(in, out, count, type, nccl_op,
                                                         communicator_->handle(),
                                                         static_cast<cudaStream_t>(own)));
        });
  }

  void Broadcast(DLTensor* tensor, int32_t root, void* stream) {
    engine_->CheckUsable();
    dpl::nccl::CheckDeviceTensor(*tensor, config_.device_id, "broadcast tensor");
    dpl::support::Require(root >= 0 && root < config_.world_size,
                          "broadcast root " + std::to_string(root) + " is outside world size " +
                              std::to_string(config_.world_size));
    const size_t bytes = dpl::support::ByteCount(*tensor);
    if (bytes == 0) return;
    UseDevice();
    void* data = dpl::support::DataPointer(*tensor);
    engine_->Issue("broadcast", Elements(*tensor) + " from rank " + std::to_string(root), stream,
                   [&](void* own) {
                     return communicator_->Answer(ncclBroadcast(data, data, bytes, ncclUint8, root,
                                                                communicator_->handle(),
                                                                static_cast<cudaStream_t>(own)));
                   });
  }

  void Allgather(const DLTensor* input, DLTensor* output, void* stream) {
    engine_->CheckUsable();
    dpl::nccl::CheckDeviceTensor(*input, config_.device_id, "allgather input");
    dpl::nccl::CheckDeviceTensor(*output, config_.device_id, "allgather output");
    // In place when the input is the rank's slice of the output: ncclAllGather's own form.
    dpl::support::CheckAllgatherPlacement(*input, *output, config_.world_size, config_.rank);
    const size_t block = dpl::support::ByteCount(*input);
    if (block == 0) return;
    UseDevice();
    const void* in = dpl::support::DataPointer(*input);
    void* out = dpl::support::DataPointer(*output);
    engine_->Issue("allgather", Elements(*input) + " per rank", stream, [&](void* own) {
      return communicator_->Answer(ncclAllGather(in, out, block, ncclUint8, communicator_->handle(),
                                                 static_cast<cudaStream_t>(own)));
    });
  }

  // ncclSend and ncclRecv in one group: both under way at once, so a cycle cannot deadlock
  // (dpl/backend_v5.h). A rank with nothing to move issues nothing: NCCL pairs them by peer.
  void SendReceive(const DLTensor* send, int32_t to, DLTensor* receive, int32_t from,
                   void* stream) {
    engine_->CheckUsable();
    dpl::support::CheckSendReceive(send, to, receive, from, config_.world_size, config_.rank);
    size_t send_bytes = 0, receive_bytes = 0;
    if (send != nullptr) {
      dpl::nccl::CheckDeviceTensor(*send, config_.device_id, "send tensor");
      send_bytes = dpl::support::ByteCount(*send);
    }
    if (receive != nullptr) {
      dpl::nccl::CheckDeviceTensor(*receive, config_.device_id, "receive tensor");
      receive_bytes = dpl::support::ByteCount(*receive);
    }
    if (send_bytes == 0 && receive_bytes == 0) return;
    UseDevice();
    const void* out = send_bytes > 0 ? dpl::support::DataPointer(*send) : nullptr;
    void* in = receive_bytes > 0 ? dpl::support::DataPointer(*receive) : nullptr;
    const std::string detail = std::to_string(send_bytes) + " bytes to rank " + std::to_string(to) +
                               ", " + std::to_string(receive_bytes) + " from rank " +
                               std::to_string(from);
    engine_->Issue("send_receive", detail, stream, [&](void* own) {
      const auto queue = static_cast<cudaStream_t>(own);
      ncclResult_t result = ncclGroupStart();
      if (result == ncclSuccess && out != nullptr) {
        result = ncclSend(out, send_bytes, ncclUint8, to, communicator_->handle(), queue);
      }
      if (result == ncclSuccess && in != nullptr) {
        result = ncclRecv(in, receive_bytes, ncclUint8, from, communicator_->handle(), queue);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return communicator_->Answer(result != ncclSuccess ? result : ended);
    });
  }

  // NCCL has no barrier: a one-element allreduce on the backend's stream, waited for.
  void Barrier() {
    engine_->CheckUsable();
    UseDevice();
    engine_->Issue("barrier", "allreduce of one int32", std::nullopt, [&](void* own) {
      return communicator_->Answer(ncclAllReduce(barrier_token_, barrier_token_, 1, ncclInt32,
                                                 ncclSum, communicator_->handle(),
                                                 static_cast<cudaStream_t>(own)));
    });
    engine_->AwaitAll("barrier");
  }

  void Synchronize(void* stream) {
    engine_->CheckUsable();
    UseDevice();
    engine_->Synchronize(stream);
  }

  // From another thread, while this instance's call polls (Note [Abort from another thread]):
  // the polling thread aborts the communicator, never this one, since NCCL allows no concurrent
  // calls on a communicator and ncclCommAbort frees it.
  void Abort() {
    BackendDefaults::Abort();
    engine_->RequestAbort();
  }

 private:
  void CheckDevice() const {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      throw PluginError(DPL_ERR_NO_DEVICE,
                        "NCCL needs a CUDA device and this machine has none; train on the CPU with "
                        "--device cpu (and --backend gloo where you named nccl)");
    }
    if (config_.device_id < 0 || config_.device_id >= devices) {
      throw PluginError(DPL_ERR_NO_DEVICE, "CUDA device " + std::to_string(config_.device_id) +
                                               " does not exist (this machine has " +
                                               std::to_string(devices) + ")");
    }
  }

  // The NCCL type of a reduction's tensor; refuses the dtypes and ops NCCL lacks, naming `what`.
  ncclDataType_t ReducibleType(const DLTensor& tensor, dpl_reduce_op op, const char* what) const {
    const ElementType element = dpl::support::ElementTypeOf(tensor.dtype);
    const auto type = NcclType(element);
    if (!type) {
      throw PluginError(DPL_ERR_UNSUPPORTED, std::string(what) + " does not support dtype " +
                                                 dpl::support::DtypeName(tensor.dtype) + "; use " +
                                                 kDtypeList);
    }
    NcclOp(op);  // refuses an unknown op first
    // ncclAvg and ncclBfloat16 came with NCCL 2.10 (version code 21000): refused here, before an
    // older library would fail the call and cost the communicator.
    if ((op == DPL_REDUCE_AVG || element == ElementType::kBFloat16) && runtime_version_ < 21000) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        std::string(what) + " " + dpl::support::ReduceOpName(op) + " of " +
                            dpl::support::DtypeName(tensor.dtype) +
                            " needs NCCL 2.10 or newer, and the loaded libnccl.so.2 is " +
                            dpl::nccl::NcclVersionText(runtime_version_));
    }
    return *type;
  }

  // The current device is per thread, and the host may call from another thread than the one
  // that created the instance.
  void UseDevice() const { CheckCuda(cudaSetDevice(config_.device_id), "cudaSetDevice"); }

  static void CheckNccl(ncclResult_t result, const char* what) {
    if (result == ncclSuccess) return;
    throw PluginError(result == ncclSystemError ? DPL_ERR_COMMUNICATION : DPL_ERR_INTERNAL,
                      std::string(what) + ": " + ncclGetErrorString(result));
  }

  void LogVersions() const {
    const int runtime = runtime_version_;
    const std::string built = dpl::nccl::NcclVersionText(NCCL_VERSION_CODE);
    dpl::support::Log(config_, DPL_LOG_INFO,
                      "nccl: NCCL " + dpl::nccl::NcclVersionText(runtime) + " (built with " +
                          built + "), rank " + std::to_string(config_.rank) + " of " +
                          std::to_string(config_.world_size) + " on CUDA device " +
                          std::to_string(config_.device_id));
    if (runtime < NCCL_VERSION_CODE) {
      dpl::support::Log(config_, DPL_LOG_WARNING,
                        "nccl: the loaded libnccl.so.2 is older than the nccl.h the plugin was "
                        "built with (" +
                            built +
                            "); build it against the NCCL the model's libtorch loads "
                            "(NCCL_ROOT)");
    }
  }

  dpl_backend_config_v3 config_;
  std::chrono::milliseconds timeout_;
  dpl::nccl::SteadyWaiter waiter_;
  std::unique_ptr<dpl::nccl::CudaDeviceQueue> queue_;
  std::unique_ptr<dpl::nccl::NcclCommunicator> communicator_;
  std::unique_ptr<dpl::nccl::CollectiveEngine> engine_;
  int32_t* barrier_token_ = nullptr;
  int runtime_version_ = 0;  // ncclGetVersion of the loaded libnccl.so.2
};

}  // namespace

DPL_EXPORT_BACKEND_V5(NcclBackend, dpl_nccl_backend_table, "2.2.0",
                      "NVIDIA NCCL collectives on CUDA tensors, on a stream of their own");
