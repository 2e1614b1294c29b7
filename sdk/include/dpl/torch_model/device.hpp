// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the device a model runs
// on, its compute threads and the process settings every model shares.
#ifndef DPL_TORCH_MODEL_DEVICE_HPP
#define DPL_TORCH_MODEL_DEVICE_HPP

#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdint>
#include <string>

#include "dpl/model.h"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/large_blocks.hpp"

namespace dpl {
namespace torch_model {
namespace {

// True when this plugin's libtorch has its CUDA part (libtorch_cuda) loaded: a CPU-only build
// (such as Debian's libtorch) answers every CUDA question through stubs that throw.
inline bool LibtorchHasCuda() {
  try {
    (void)at::detail::getCUDAHooks().versionCUDART();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

// The device of the config's device_type and device_id, checked to exist.
inline c10::Device SelectDevice(int32_t device_type, int32_t device_id) {
  if (device_type == kDLCPU) return c10::Device(c10::kCPU);
  if (device_type != kDLCUDA) {
    throw PluginError(DPL_ERR_UNSUPPORTED, std::string("device type ") +
                                               std::to_string(device_type) +
                                               " is not supported; use --device cpu or cuda");
  }
  if (!LibtorchHasCuda()) {
    throw PluginError(
        DPL_ERR_NO_DEVICE,
        std::string("this plugin's libtorch is a CPU-only build (no CUDA support); use --device "
                    "cpu, or rebuild the plugin against a libtorch with CUDA"));
  }
  if (!torch::cuda::is_available()) {
    throw PluginError(DPL_ERR_NO_DEVICE,
                      std::string("libtorch has CUDA but sees no GPU (no driver, or "
                                  "CUDA_VISIBLE_DEVICES hides them all); use --device cpu"));
  }
  const auto count = static_cast<int32_t>(torch::cuda::device_count());
  if (device_id < 0 || device_id >= count) {
    throw PluginError(DPL_ERR_NO_DEVICE, std::string("CUDA device ") + std::to_string(device_id) +
                                             " does not exist (" + std::to_string(count) +
                                             " visible)");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_id));
}

// Makes the model's device current on the calling thread for the scope. The host calls entry
// points from several threads, and CUDA's current device is per thread; a CPU model needs none.
class DeviceScope {
 public:
  explicit DeviceScope(c10::Device device) {
    if (device.is_cuda()) guard_.reset_device(device);
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

// Intra-op threads follow the config; inter-op parallelism is pinned to 1 once per process
// (libtorch allows setting it only before its first inter-op use).
inline void ConfigureThreads(int32_t num_threads) {
  if (num_threads < 1) {
    throw InvalidArgument("num_threads must be >= 1, got " + std::to_string(num_threads));
  }
  if (at::get_num_threads() != num_threads) at::set_num_threads(num_threads);
  static const bool interop_pinned = [] {
    try {
      if (at::get_num_interop_threads() != 1) at::set_num_interop_threads(1);
    } catch (const c10::Error&) {
      // Already in use by someone else in this process: keep theirs.
    }
    return true;
  }();
  (void)interop_pinned;
}

// Note [Keep freed activations in the heap]
// Every step allocates and frees the same few multi-megabyte activation and gradient buffers.
// glibc serves blocks that large with mmap and returns them with munmap, so each step pays page
// faults on fresh zero pages: measured on the ConvNet at batch 128, one thread, this tripled the
// step time (145 ms against 50 ms). Raising the mmap and trim thresholds once per process keeps
// those buffers in the heap for reuse. It only changes where memory comes from. Blocks above
// 32 MiB still get their own mappings, reused by the allocator of Note [Large blocks kept for
// reuse]: in the heap they fragment it.
inline void KeepLargeBuffersInHeap() {
  KeepLargeBlocksForReuse();
#if defined(__GLIBC__)
  static const bool configured = [] {
    // The default ceiling of glibc's own sliding threshold on 64-bit.
    mallopt(M_MMAP_THRESHOLD, static_cast<int>(LargeBlockCache::kMinBytes));
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
    mallopt(M_TOP_PAD, 64 * 1024 * 1024);
    return true;
  }();
  (void)configured;
#endif
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_DEVICE_HPP
