// The nccl backend's NCCL communicator (see nccl_communicator.hpp).
//
// Note [Bounded abort]: ncclCommAbort itself has hung in some NCCL versions (NVIDIA/nccl#829;
// PyTorch grew a way to tear the process down without it). An abort that does not return would
// make the timeout it enforces meaningless, so it runs on a thread of its own and is waited for
// at most `abort_limit`; past that the thread is left behind and the failure is reported anyway:
// the host ends the job when a rank fails, and the process with it.
#include "nccl_communicator.hpp"

#include <cuda_runtime_api.h>

#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

namespace dpl::nccl {

std::string NcclVersionText(int code) {
  const bool new_encoding = code >= 10000;  // 2.9 and later
  const int major = new_encoding ? code / 10000 : code / 1000;
  const int minor = new_encoding ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int rank, int world_size, int device_id,
                                   std::chrono::milliseconds abort_limit, LogFunction log,
                                   Progress* started)
    : device_id_(device_id), abort_limit_(abort_limit), log_(std::move(log)) {
#ifdef DPL_NCCL_HAS_NONBLOCKING
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; State() says when it is done
  *started = Answer(ncclCommInitRankConfig(&comm_, world_size, id, rank, &config));
#else
  // Before NCCL 2.14 setup blocks, without a bound of ours.
  *started = Answer(ncclCommInitRank(&comm_, world_size, id, rank));
#endif
}

NcclCommunicator::~NcclCommunicator() {
  Abort();
}

Progress NcclCommunicator::Answer(ncclResult_t result) const {
  if (result == ncclSuccess) return Progress::Done();
#ifdef DPL_NCCL_HAS_NONBLOCKING
  if (result == ncclInProgress) return Progress::Pending();
#endif
  std::string text = ncclGetErrorString(result);
#ifdef DPL_NCCL_HAS_LAST_ERROR
  const char* detail = ncclGetLastError(comm_);
  if (detail != nullptr && detail[0] != '\0') text += " (" + std::string(detail) + ")";
#endif
  bool peer_failed = result == ncclSystemError;
#ifdef DPL_NCCL_HAS_LAST_ERROR
  peer_failed = peer_failed || result == ncclRemoteError;
#endif
  return Progress::Failed(peer_failed ? DPL_ERR_COMMUNICATION : DPL_ERR_INTERNAL, text);
}

Progress NcclCommunicator::State() {
  if (comm_ == nullptr) return Progress::Failed(DPL_ERR_INTERNAL, "the communicator is gone");
  ncclResult_t async_error = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm_, &async_error);
  if (asked != ncclSuccess) return Answer(asked);
  return Answer(async_error);
}

void NcclCommunicator::Abort() {
  if (comm_ == nullptr) return;
  const ncclComm_t comm = comm_;
  comm_ = nullptr;
  const int device = device_id_;
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> done = finished->get_future();
  try {
    std::thread([comm, device, finished] {
      cudaSetDevice(device);
      ncclCommAbort(comm);
      finished->set_value();
    }).detach();
  } catch (const std::system_error&) {  // no thread to be had: abort here, unbounded
    ncclCommAbort(comm);
    return;
  }
  if (done.wait_for(abort_limit_) != std::future_status::ready && log_) {
    log_(DPL_LOG_ERROR, "ncclCommAbort did not return within " +
                            std::to_string(abort_limit_.count()) +
                            " ms; it is left running and this process should end");
  }
}

Progress NcclCommunicator::Finalize() {
#ifdef DPL_NCCL_HAS_NONBLOCKING
  if (comm_ == nullptr) return Progress::Failed(DPL_ERR_INTERNAL, "the communicator is gone");
  return Answer(ncclCommFinalize(comm_));
#else
  return Progress::Done();  // ncclCommDestroy flushes by itself
#endif
}

void NcclCommunicator::Destroy() {
  if (comm_ == nullptr) return;
  ncclCommDestroy(comm_);
  comm_ = nullptr;
}

}  // namespace dpl::nccl
