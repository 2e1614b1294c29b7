// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the forward pass's
// precision (model ABI v3, dpl_precision), run as libtorch's autocast.
//
// Note [Mixed precision]: under bf16 or fp16 the forward pass runs inside libtorch's autocast
// (torch.autocast in Python): convolutions and linear layers take low-precision copies of their
// float32 inputs and weights, ops autocast keeps in float32 stay there. The parameters stay float32
// (the master copy the host updates), so their gradients arrive float32 through the casts'
// backward. The loss is computed outside autocast from the output converted to float32, and
// backward runs outside it too (as torch.autocast's documentation asks). What a device cannot run
// is refused at create, never replaced by float32 behind the user's back. Under fp16 the host sets
// a loss scale (set_loss_scale): backward runs on the float32 loss times the scale, as
// GradScaler.scale(loss).backward() does, and the host unscales the summed gradients.
#ifndef DPL_TORCH_MODEL_PRECISION_HPP
#define DPL_TORCH_MODEL_PRECISION_HPP

#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <string>

#include "dpl/model.h"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/libtorch_versions.hpp"

namespace dpl {
namespace torch_model {
namespace {

inline const char* PrecisionName(dpl_precision precision) {
  switch (precision) {
    case DPL_PRECISION_FP32:
      return "fp32";
    case DPL_PRECISION_BF16:
      return "bf16";
    case DPL_PRECISION_FP16:
      return "fp16";
  }
  return "unknown";
}

inline c10::ScalarType LowPrecisionType(dpl_precision precision) {
  return precision == DPL_PRECISION_FP16 ? c10::kHalf : c10::kBFloat16;
}

// True when the CPU has bfloat16 arithmetic (oneDNN uses it); elsewhere bf16 is emulated.
inline bool CpuHasBfloat16Instructions() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

// The precision of config.precision on `device`; refuses what the device cannot run
// (DPL_ERR_UNSUPPORTED naming both) and values model ABI v3 does not know. The device must be
// current (DeviceScope).
inline dpl_precision CheckPrecision(int32_t value, c10::Device device) {
  if (value != DPL_PRECISION_FP32 && value != DPL_PRECISION_BF16 && value != DPL_PRECISION_FP16) {
    throw InvalidArgument("precision " + std::to_string(value) +
                          " is unknown; model ABI v3 knows 0 (fp32), 1 (bf16) and 2 (fp16)");
  }
  const auto precision = static_cast<dpl_precision>(value);
  if (device.is_cpu() && precision == DPL_PRECISION_FP16) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "precision fp16 is not supported on the CPU: dpl's CPU path runs bfloat16 "
                      "only (float16 has no fast arithmetic on most CPUs, and libtorch 1.13's CPU "
                      "autocast has none at all); use --precision bf16 or fp32");
  }
  if (device.is_cuda() && precision == DPL_PRECISION_BF16 &&
      !at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8()) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      "precision bf16 is not supported on CUDA device " +
                          std::to_string(device.index()) +
                          ": bfloat16 convolutions need compute capability 8.0 or newer and "
                          "cuDNN 8; use --precision fp16 or fp32");
  }
  return precision;
}

// Autocast for the scope on the calling thread (autocast state is per thread), restoring what
// was there before; fp32 does nothing. The cast cache lives as long as the outermost scope.
class AutocastScope {
 public:
  AutocastScope(dpl_precision precision, c10::Device device)
      : active_(precision != DPL_PRECISION_FP32), cuda_(device.is_cuda()) {
    if (!active_) return;
    was_enabled_ = AutocastEnabled(cuda_);
    previous_type_ = AutocastType(cuda_);
    SetAutocastType(cuda_, LowPrecisionType(precision));
    SetAutocastEnabled(cuda_, true);
    at::autocast::increment_nesting();
  }

  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    SetAutocastEnabled(cuda_, was_enabled_);
    SetAutocastType(cuda_, previous_type_);
  }

  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_;
  bool cuda_;
  bool was_enabled_ = false;
  c10::ScalarType previous_type_ = c10::kFloat;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_PRECISION_HPP
