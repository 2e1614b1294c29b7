// The nccl backend's CUDA stream and events (see cuda_device_queue.hpp).
#include "cuda_device_queue.hpp"

#include "dpl/support/error.hpp"

namespace dpl::nccl {

using support::PluginError;

void CheckCuda(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return;
  throw PluginError(DPL_ERR_INTERNAL,
                    what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

CudaDeviceQueue::CudaDeviceQueue() {
  CheckCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags (the nccl backend's own stream)");
  try {
    caller_reached_ = NewEvent();
    own_reached_ = NewEvent();
  } catch (...) {
    if (caller_reached_ != nullptr) cudaEventDestroy(caller_reached_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaDeviceQueue::~CudaDeviceQueue() {
  // Destroying an event or a stream with work still pending is allowed: CUDA releases them once
  // the work is done (or was aborted).
  for (const auto& entry : markers_) cudaEventDestroy(entry.second);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  cudaEventDestroy(caller_reached_);
  cudaEventDestroy(own_reached_);
  cudaStreamDestroy(stream_);
}

cudaEvent_t CudaDeviceQueue::NewEvent() {
  cudaEvent_t event = nullptr;
  CheckCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}

void CudaDeviceQueue::WaitFor(void* caller_stream) {
  // One event serves every call: a wait takes the event's state when it is enqueued.
  CheckCuda(cudaEventRecord(caller_reached_, static_cast<cudaStream_t>(caller_stream)),
            "cudaEventRecord on the caller's stream");
  CheckCuda(cudaStreamWaitEvent(stream_, caller_reached_, 0),
            "cudaStreamWaitEvent (the nccl stream waiting for the caller's)");
}

DeviceQueue::Marker CudaDeviceQueue::Mark() {
  cudaEvent_t event = nullptr;
  if (spare_events_.empty()) {
    event = NewEvent();
  } else {
    event = spare_events_.back();
    spare_events_.pop_back();
  }
  const cudaError_t recorded = cudaEventRecord(event, stream_);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(event);
    CheckCuda(recorded, "cudaEventRecord on the nccl stream");
  }
  const Marker marker = next_marker_++;
  markers_.emplace(marker, event);
  return marker;
}

Progress CudaDeviceQueue::Query(Marker marker) {
  const auto found = markers_.find(marker);
  if (found == markers_.end()) return Progress::Done();
  const cudaError_t state = cudaEventQuery(found->second);
  if (state == cudaSuccess) return Progress::Done();
  if (state == cudaErrorNotReady) return Progress::Pending();
  return Progress::Failed(DPL_ERR_INTERNAL, std::string(cudaGetErrorName(state)) + " (" +
                                                cudaGetErrorString(state) + ")");
}

void CudaDeviceQueue::Release(Marker marker) {
  const auto found = markers_.find(marker);
  if (found == markers_.end()) return;
  spare_events_.push_back(found->second);
  markers_.erase(found);
}

void CudaDeviceQueue::OrderCallerAfter(void* caller_stream) {
  CheckCuda(cudaEventRecord(own_reached_, stream_), "cudaEventRecord on the nccl stream");
  CheckCuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(caller_stream), own_reached_, 0),
            "cudaStreamWaitEvent (the caller's stream waiting for the nccl stream)");
}

}  // namespace dpl::nccl
