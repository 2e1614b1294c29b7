// Two CPU kernels the ConvNet's profile asked for, computing exactly what libtorch computes.
//
// Note [Why own kernels for ReLU and max-pool]: in the libtorch 1.13 that Debian ships (and that
// the Python peer runs), the NCHW max_pool2d kernel and ReLU's backward (threshold_backward) are
// not vectorised: on the ConvNet's (64, 32, 24, 24) activations max_pool2d takes 5.6 ms and
// threshold_backward 1.2 ms where a copy of the same tensor takes 0.12 ms; together they were
// over half of a training step (autograd profiler, batch 64, one thread). ReluMaxPool2x2 is
// relu then max_pool2d(2) in one pass that remembers the winner of each window, and its backward
// is one pass too; Relu keeps libtorch's forward and replaces only its backward. Results are the
// same values as torch::relu / torch::max_pool2d: the same maximum, the same winner on ties (the
// first in row-major order; a NaN wins), the same gradients, in float32 and in bfloat16. On other
// devices and dtypes both fall back to libtorch's own operators.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dpl::convnet {
namespace {

// Elements per parallel task: large enough that threads are not woken for tiny pieces.
constexpr int64_t kGrainElements = 32768;

// The kernels run on float32 and on bfloat16 (the activations of a bf16 autocast forward pass,
// Note [Mixed precision] of the SDK helper). A bfloat16 value is handled as its 16 bits, and
// compared as the float32 it widens to exactly, so the winners, ties and NaNs are those of the
// float32 kernels; the values written are input values or zero, never rounded.
using Bfloat16Bits = uint16_t;

inline float Key(float value) {
  return value;
}

inline float Key(Bfloat16Bits bits) {
  const uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

// The loops below are written so that GCC vectorises them for the baseline x86-64 instruction
// set: every value is loaded unconditionally and chosen with a select (a loop with a conditional
// load is not if-converted), and the pointers are __restrict.

// torch::relu's value: max(x, 0); NaN stays NaN.
template <typename T>
T ReluValue(T x) {
  const float key = Key(x);
  return key > 0.0f || key != key ? x : T(0);
}

template <typename T>
void ReluBackwardLoop(const T* __restrict output, const T* __restrict grad,
                      T* __restrict grad_input, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T g = grad[i];
    grad_input[i] = Key(output[i]) > 0.0f ? g : T(0);
  }
}

// Winner codes of ReluMaxPool2x2: 0..3 = position in the 2x2 window (row-major); kNoGradient =
// the window's maximum is not positive, so ReLU passes no gradient back.
constexpr int32_t kNoGradient = 4;

// One output row of max_pool2d(relu(x), 2) from the input rows `top` and `bottom`. The scan is
// libtorch's: the first value wins, then a strictly larger value or a NaN takes over.
template <typename T>
void ReluMaxPoolRow(const T* __restrict top, const T* __restrict bottom, T* __restrict output,
                    int32_t* __restrict winners, int64_t width) {
  for (int64_t ow = 0; ow < width; ++ow) {
    const T v1 = ReluValue(top[2 * ow + 1]), v2 = ReluValue(bottom[2 * ow]);
    const T v3 = ReluValue(bottom[2 * ow + 1]);
    T best = ReluValue(top[2 * ow]);
    float best_key = Key(best);
    int32_t winner = 0;
    float key = Key(v1);
    bool takes = key > best_key || key != key;
    best = takes ? v1 : best;
    best_key = takes ? key : best_key;
    winner = takes ? 1 : winner;
    key = Key(v2);
    takes = key > best_key || key != key;
    best = takes ? v2 : best;
    best_key = takes ? key : best_key;
    winner = takes ? 2 : winner;
    key = Key(v3);
    takes = key > best_key || key != key;
    best = takes ? v3 : best;
    best_key = takes ? key : best_key;
    winner = takes ? 3 : winner;
    output[ow] = best;
    winners[ow] = best_key > 0.0f ? winner : kNoGradient;
  }
}

// The gradient of one output row back into its two input rows (the windows do not overlap).
template <typename T>
void ReluMaxPoolBackwardRow(const T* __restrict grad, const int32_t* __restrict winners,
                            T* __restrict top, T* __restrict bottom, int64_t width) {
  for (int64_t ow = 0; ow < width; ++ow) {
    const T g = grad[ow];
    const int32_t winner = winners[ow];
    top[2 * ow] = winner == 0 ? g : T(0);
    top[2 * ow + 1] = winner == 1 ? g : T(0);
    bottom[2 * ow] = winner == 2 ? g : T(0);
    bottom[2 * ow + 1] = winner == 3 ? g : T(0);
  }
}

// The tensor's elements as the kernels' T: float, or the bits of c10::BFloat16.
template <typename T>
T* Elements(const torch::Tensor& tensor) {
  if constexpr (std::is_same_v<T, float>) {
    return tensor.data_ptr<float>();
  } else {
    return reinterpret_cast<T*>(tensor.data_ptr<c10::BFloat16>());
  }
}

// Runs `body` with T = float or Bfloat16Bits, as `tensor` holds.
template <typename Body>
auto ForElementType(const torch::Tensor& tensor, Body&& body) {
  if (tensor.scalar_type() == torch::kBFloat16) return body(Bfloat16Bits{});
  return body(float{});
}

// relu(x) with a one-pass backward: the gradient where the output is positive, else 0.
class ReluFunction : public torch::autograd::Function<ReluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, torch::Tensor input) {
    torch::Tensor output = torch::relu(input);
    context->save_for_backward({output});
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor output = context->get_saved_variables()[0].contiguous();
    const torch::Tensor grad = grad_outputs[0].contiguous();
    torch::Tensor grad_input = torch::empty_like(grad);
    ForElementType(grad, [&](auto type) {
      using T = decltype(type);
      const T* out = Elements<T>(output);
      const T* in = Elements<T>(grad);
      T* result = Elements<T>(grad_input);
      at::parallel_for(0, grad.numel(), kGrainElements, [&](int64_t begin, int64_t end) {
        ReluBackwardLoop(out + begin, in + begin, result + begin, end - begin);
      });
    });
    return {grad_input};
  }
};

// max_pool2d(relu(x), 2) on an NCHW tensor, remembering each window's winner for backward.
class ReluMaxPool2x2Function : public torch::autograd::Function<ReluMaxPool2x2Function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, torch::Tensor input) {
    input = input.contiguous();
    const int64_t planes = input.size(0) * input.size(1);
    const int64_t height = input.size(2), width = input.size(3);
    const int64_t out_height = height / 2, out_width = width / 2;
    torch::Tensor output =
        torch::empty({input.size(0), input.size(1), out_height, out_width}, input.options());
    torch::Tensor winners = torch::empty(output.sizes(), input.options().dtype(torch::kInt32));
    int32_t* win = winners.data_ptr<int32_t>();
    const int64_t plane_grain = std::max<int64_t>(1, kGrainElements / (height * width));
    ForElementType(input, [&](auto type) {
      using T = decltype(type);
      const T* in = Elements<T>(input);
      T* out = Elements<T>(output);
      at::parallel_for(0, planes, plane_grain, [&](int64_t begin, int64_t end) {
        for (int64_t plane = begin; plane < end; ++plane) {
          const T* source = in + plane * height * width;
          for (int64_t oh = 0; oh < out_height; ++oh) {
            const int64_t row = (plane * out_height + oh) * out_width;
            ReluMaxPoolRow(source + 2 * oh * width, source + (2 * oh + 1) * width, out + row,
                           win + row, out_width);
          }
        }
      });
    });
    context->save_for_backward({winners});
    context->saved_data["height"] = height;
    context->saved_data["width"] = width;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor winners = context->get_saved_variables()[0];
    const torch::Tensor grad = grad_outputs[0].contiguous();
    const int64_t height = context->saved_data["height"].toInt();
    const int64_t width = context->saved_data["width"].toInt();
    const int64_t planes = grad.size(0) * grad.size(1);
    const int64_t out_height = grad.size(2), out_width = grad.size(3);
    // The windows tile the input; only an odd last row or column lies outside every window.
    const bool tiled = height == 2 * out_height && width == 2 * out_width;
    const std::vector<int64_t> sizes{grad.size(0), grad.size(1), height, width};
    torch::Tensor grad_input =
        tiled ? torch::empty(sizes, grad.options()) : torch::zeros(sizes, grad.options());
    const int32_t* win = winners.data_ptr<int32_t>();
    const int64_t plane_grain = std::max<int64_t>(1, kGrainElements / (height * width));
    ForElementType(grad, [&](auto type) {
      using T = decltype(type);
      const T* in = Elements<T>(grad);
      T* out = Elements<T>(grad_input);
      at::parallel_for(0, planes, plane_grain, [&](int64_t begin, int64_t end) {
        for (int64_t plane = begin; plane < end; ++plane) {
          T* target = out + plane * height * width;
          for (int64_t oh = 0; oh < out_height; ++oh) {
            const int64_t row = (plane * out_height + oh) * out_width;
            ReluMaxPoolBackwardRow(in + row, win + row, target + 2 * oh * width,
                                   target + (2 * oh + 1) * width, out_width);
          }
        }
      });
    });
    return {grad_input};
  }
};

bool OwnKernelsApply(const torch::Tensor& input) {
  return input.device().is_cpu() &&
         (input.scalar_type() == torch::kFloat32 || input.scalar_type() == torch::kBFloat16);
}

torch::Tensor Relu(const torch::Tensor& input) {
  return OwnKernelsApply(input) ? ReluFunction::apply(input) : torch::relu(input);
}

// max_pool2d(relu(input), 2) for an (N, C, H, W) input.
torch::Tensor ReluMaxPool2x2(const torch::Tensor& input) {
  if (!OwnKernelsApply(input) || input.dim() != 4) return torch::max_pool2d(torch::relu(input), 2);
  return ReluMaxPool2x2Function::apply(input);
}

}  // namespace
}  // namespace dpl::convnet
