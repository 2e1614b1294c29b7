// The DeviceQueue of the nccl backend on CUDA: a non-blocking stream of its own, ordered against
// the caller's stream with events (Note [Collectives on a stream of their own]).
#ifndef DPL_PLUGINS_NCCL_CUDA_DEVICE_QUEUE_HPP
#define DPL_PLUGINS_NCCL_CUDA_DEVICE_QUEUE_HPP

#include <cuda_runtime_api.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "collective_engine.hpp"

namespace dpl::nccl {

// Throws PluginError(DPL_ERR_INTERNAL, "<what>: <CUDA's name and text>") unless `error` is
// cudaSuccess.
void CheckCuda(cudaError_t error, const std::string& what);

// Every call expects the current device to be the queue's (the backend sets it on entry).
class CudaDeviceQueue final : public DeviceQueue {
 public:
  // Creates the stream (cudaStreamNonBlocking: it does not wait for the legacy default stream)
  // and its events on the current device.
  CudaDeviceQueue();
  ~CudaDeviceQueue() override;
  CudaDeviceQueue(const CudaDeviceQueue&) = delete;
  CudaDeviceQueue& operator=(const CudaDeviceQueue&) = delete;

  void* Stream() override { return stream_; }
  void WaitFor(void* caller_stream) override;
  Marker Mark() override;
  Progress Query(Marker marker) override;
  void Release(Marker marker) override;
  void OrderCallerAfter(void* caller_stream) override;

 private:
  cudaEvent_t NewEvent();

  cudaStream_t stream_ = nullptr;
  cudaEvent_t caller_reached_ = nullptr;  // recorded on the caller's stream, waited for here
  cudaEvent_t own_reached_ = nullptr;     // recorded here, waited for by the caller's stream
  std::unordered_map<Marker, cudaEvent_t> markers_;
  std::vector<cudaEvent_t> spare_events_;  // released markers' events, recorded again later
  Marker next_marker_ = 1;
};

}  // namespace dpl::nccl

#endif  // DPL_PLUGINS_NCCL_CUDA_DEVICE_QUEUE_HPP
