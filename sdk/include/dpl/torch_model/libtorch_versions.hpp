// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the few libtorch calls
// whose spelling changed between libtorch 1.13 (Debian's) and 2.x (pip's torch, which GPU
// machines have), behind one name each, so the helper compiles against both.
//
// - Warning handlers: 1.13's c10::WarningHandler::process takes (location, message, verbatim) and
//   its guard is c10::Warning::WarningHandlerGuard; 2.x passes one c10::Warning and moved the
//   guard to c10::WarningUtils, where c10::Warning became the warning's class.
// - Autocast: 1.13 has a function per device kind (set_enabled for CUDA, set_cpu_enabled...);
//   2.4 added the same functions taking the device type and deprecated the others.
// - Autograd nodes: held by std::shared_ptr up to 2.14, by c10::intrusive_ptr from 2.15 on;
//   NodeHandle is whichever grad_accumulator returns.
// - Attention: 2.0 added at::scaled_dot_product_attention (fused kernels: flash and
//   memory-efficient attention on CUDA); 1.13 has none, so models write attention out there.
#ifndef DPL_TORCH_MODEL_LIBTORCH_VERSIONS_HPP
#define DPL_TORCH_MODEL_LIBTORCH_VERSIONS_HPP

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <string>
#include <utility>

#define DPL_LIBTORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// 1 where at::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal)
// exists, else 0.
#define DPL_LIBTORCH_HAS_SCALED_DOT_PRODUCT_ATTENTION DPL_LIBTORCH_AT_LEAST(2, 0)

namespace dpl {
namespace torch_model {
namespace {

// What keeps an autograd node (a parameter's gradient accumulator) alive.
using NodeHandle =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// A warning handler whose subclasses implement Record(message) whatever libtorch's spelling.
class MessageWarningHandler : public c10::WarningHandler {
 public:
#if DPL_LIBTORCH_AT_LEAST(2, 0)
  void process(const c10::Warning& warning) override {
    Record(warning.msg());
  }
#else
  void process(const c10::SourceLocation& /*location*/, const std::string& message,
               const bool /*verbatim*/) override {
    Record(message);
  }
#endif

 protected:
  virtual void Record(const std::string& message) = 0;
};

#if DPL_LIBTORCH_AT_LEAST(2, 0)
using WarningHandlerScope = c10::WarningUtils::WarningHandlerGuard;
#else
using WarningHandlerScope = c10::Warning::WarningHandlerGuard;
#endif

// Autocast state of the calling thread for CUDA (`cuda`) or the CPU.
inline bool AutocastEnabled(bool cuda) {
#if DPL_LIBTORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

inline void SetAutocastEnabled(bool cuda, bool enabled) {
#if DPL_LIBTORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
#else
  if (cuda) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

inline c10::ScalarType AutocastType(bool cuda) {
#if DPL_LIBTORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

inline void SetAutocastType(bool cuda, c10::ScalarType type) {
#if DPL_LIBTORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, type);
#else
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(type);
  } else {
    at::autocast::set_autocast_cpu_dtype(type);
  }
#endif
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_LIBTORCH_VERSIONS_HPP
