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
// devices and dtypes both fall back to libtorch's own operators. The ConvNet runs its activations
// channels-last (NHWC) on the CPU, because oneDNN's convolutions otherwise reorder NCHW tensors to
// their blocked layout and back on every call (docs/performance.md, "The ceiling on an AVX-512
// machine"): both kernels take NCHW and NHWC, the NHWC max-pool vectorised over the channels.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dpl/torch_model/parallel.hpp"

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

// max(relu(window)) of one 2x2 window and its winner code. The scan is libtorch's: the first
// value wins, then a strictly larger value or a NaN takes over. Inlined into the loops below, whose
// iterations GCC vectorises (the loop over the window is unrolled away).
template <typename T>
inline __attribute__((always_inline)) void ReluMaxWindow(T top_left, T top_right, T bottom_left,
                                                         T bottom_right, T& output,
                                                         int32_t& winner_code) {
  const T values[4] = {ReluValue(top_left), ReluValue(top_right), ReluValue(bottom_left),
                       ReluValue(bottom_right)};
  T best = values[0];
  float best_key = Key(best);
  int32_t winner = 0;
  for (int32_t position = 1; position < 4; ++position) {
    const float key = Key(values[position]);
    const bool takes = key > best_key || key != key;
    best = takes ? values[position] : best;
    best_key = takes ? key : best_key;
    winner = takes ? position : winner;
  }
  output = best;
  winner_code = best_key > 0.0f ? winner : kNoGradient;
}

// One output row of max_pool2d(relu(x), 2) from the input rows `top` and `bottom`.
template <typename T>
void ReluMaxPoolRow(const T* __restrict top, const T* __restrict bottom, T* __restrict output,
                    int32_t* __restrict winners, int64_t width) {
  for (int64_t ow = 0; ow < width; ++ow) {
    ReluMaxWindow(top[2 * ow], top[2 * ow + 1], bottom[2 * ow], bottom[2 * ow + 1], output[ow],
                  winners[ow]);
  }
}

// The backward kernels only move gradients: they run on the values' bits (GradientBits), where a
// select is an AND with a mask, which GCC vectorises (it does not if-convert a select of floats
// stored to four places).
template <typename T>
using GradientBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;

// All ones where `keep`, else zero.
template <typename Bits>
Bits Select(bool keep) {
  return Bits(-Bits(keep));
}

// The gradient of one output row back into its two input rows (the windows do not overlap).
template <typename T>
void ReluMaxPoolBackwardRow(const T* __restrict grad, const int32_t* __restrict winners,
                            T* __restrict top, T* __restrict bottom, int64_t width) {
  for (int64_t ow = 0; ow < width; ++ow) {
    const T g = grad[ow];
    const int32_t winner = winners[ow];
    top[2 * ow] = g & Select<T>(winner == 0);
    top[2 * ow + 1] = g & Select<T>(winner == 1);
    bottom[2 * ow] = g & Select<T>(winner == 2);
    bottom[2 * ow + 1] = g & Select<T>(winner == 3);
  }
}

// The channels-last form of ReluMaxPoolRow: `count` channels of one output position, whose 2x2
// window is the four input positions `top_left` .. `bottom_right` (each `count` contiguous
// channels). The same scan, in the same order, vectorised over the channels.
template <typename T>
void ReluMaxPoolChannels(const T* __restrict top_left, const T* __restrict top_right,
                         const T* __restrict bottom_left, const T* __restrict bottom_right,
                         T* __restrict output, int32_t* __restrict winners, int64_t count) {
  for (int64_t c = 0; c < count; ++c) {
    ReluMaxWindow(top_left[c], top_right[c], bottom_left[c], bottom_right[c], output[c],
                  winners[c]);
  }
}

template <typename T>
void ReluMaxPoolBackwardChannels(const T* __restrict grad, const int32_t* __restrict winners,
                                 T* __restrict top_left, T* __restrict top_right,
                                 T* __restrict bottom_left, T* __restrict bottom_right,
                                 int64_t count) {
  for (int64_t c = 0; c < count; ++c) {
    const T g = grad[c];
    const int32_t winner = winners[c];
    top_left[c] = g & Select<T>(winner == 0);
    top_right[c] = g & Select<T>(winner == 1);
    bottom_left[c] = g & Select<T>(winner == 2);
    bottom_right[c] = g & Select<T>(winner == 3);
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

// The layout the kernels run in: channels-last when `tensor` is (N, H, W, C) in memory and not
// also (N, C, H, W) (as a tensor with one channel is), else contiguous (N, C, H, W).
at::MemoryFormat KernelLayout(const torch::Tensor& tensor) {
  return tensor.dim() == 4 && !tensor.is_contiguous() &&
                 tensor.is_contiguous(at::MemoryFormat::ChannelsLast)
             ? at::MemoryFormat::ChannelsLast
             : at::MemoryFormat::Contiguous;
}

// relu(x) with a one-pass backward: the gradient where the output is positive, else 0. The pass
// runs over memory in the output's layout, NCHW or NHWC alike.
class ReluFunction : public torch::autograd::Function<ReluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, torch::Tensor input) {
    torch::Tensor output = torch::relu(input);
    context->save_for_backward({output});
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list grad_outputs) {
    torch::Tensor output = context->get_saved_variables()[0];
    const at::MemoryFormat layout = KernelLayout(output);
    output = output.contiguous(layout);
    const torch::Tensor grad = grad_outputs[0].contiguous(layout);
    torch::Tensor grad_input = torch::empty_like(grad, grad.options(), layout);
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

// max_pool2d(relu(x), 2) on an NCHW or NHWC tensor (the output in the input's layout),
// remembering each window's winner for backward.
class ReluMaxPool2x2Function : public torch::autograd::Function<ReluMaxPool2x2Function> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* context, torch::Tensor input) {
    const at::MemoryFormat layout = KernelLayout(input);
    input = input.contiguous(layout);
    const std::vector<int64_t> sizes{input.size(0), input.size(1), input.size(2) / 2,
                                     input.size(3) / 2};
    torch::Tensor output = torch::empty(sizes, input.options().memory_format(layout));
    torch::Tensor winners =
        torch::empty(sizes, input.options().dtype(torch::kInt32).memory_format(layout));
    ForElementType(input, [&](auto type) {
      using T = decltype(type);
      if (layout == at::MemoryFormat::ChannelsLast) {
        ForwardChannelsLast<T>(input, output, winners);
      } else {
        ForwardPlanes<T>(input, output, winners);
      }
    });
    context->save_for_backward({winners});
    context->saved_data["height"] = input.size(2);
    context->saved_data["width"] = input.size(3);
    context->saved_data["channels_last"] = layout == at::MemoryFormat::ChannelsLast;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::Tensor winners = context->get_saved_variables()[0];
    const at::MemoryFormat layout = context->saved_data["channels_last"].toBool()
                                        ? at::MemoryFormat::ChannelsLast
                                        : at::MemoryFormat::Contiguous;
    const torch::Tensor grad = grad_outputs[0].contiguous(layout);
    const int64_t height = context->saved_data["height"].toInt();
    const int64_t width = context->saved_data["width"].toInt();
    // The windows tile the input; only an odd last row or column lies outside every window.
    const bool tiled = height == 2 * grad.size(2) && width == 2 * grad.size(3);
    const std::vector<int64_t> sizes{grad.size(0), grad.size(1), height, width};
    const torch::TensorOptions options = grad.options().memory_format(layout);
    torch::Tensor grad_input = torch::empty(sizes, options);  // (zeros ignores the layout)
    if (!tiled) grad_input.zero_();
    ForElementType(grad, [&](auto type) {
      using T = decltype(type);
      if (layout == at::MemoryFormat::ChannelsLast) {
        BackwardChannelsLast<GradientBits<T>>(grad, winners, grad_input);
      } else {
        BackwardPlanes<GradientBits<T>>(grad, winners, grad_input);
      }
    });
    return {grad_input};
  }

 private:
  // NCHW: one (H, W) plane after the other, row by row.
  template <typename T>
  static void ForwardPlanes(const torch::Tensor& input, torch::Tensor& output,
                            torch::Tensor& winners) {
    const int64_t planes = input.size(0) * input.size(1);
    const int64_t height = input.size(2), width = input.size(3);
    const int64_t out_height = output.size(2), out_width = output.size(3);
    const T* in = Elements<T>(input);
    T* out = Elements<T>(output);
    int32_t* win = winners.data_ptr<int32_t>();
    const int64_t plane_grain = std::max<int64_t>(1, kGrainElements / (height * width));
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
  }

  template <typename Bits>
  static void BackwardPlanes(const torch::Tensor& grad, const torch::Tensor& winners,
                             torch::Tensor& grad_input) {
    const int64_t planes = grad.size(0) * grad.size(1);
    const int64_t height = grad_input.size(2), width = grad_input.size(3);
    const int64_t out_height = grad.size(2), out_width = grad.size(3);
    const Bits* in = static_cast<const Bits*>(grad.data_ptr());
    const int32_t* win = winners.data_ptr<int32_t>();
    Bits* out = static_cast<Bits*>(grad_input.data_ptr());
    const int64_t plane_grain = std::max<int64_t>(1, kGrainElements / (height * width));
    at::parallel_for(0, planes, plane_grain, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        Bits* target = out + plane * height * width;
        for (int64_t oh = 0; oh < out_height; ++oh) {
          const int64_t row = (plane * out_height + oh) * out_width;
          ReluMaxPoolBackwardRow(in + row, win + row, target + 2 * oh * width,
                                 target + (2 * oh + 1) * width, out_width);
        }
      }
    });
  }

  // NHWC: one output row (N, oh) after the other, each position's channels in one vector loop.
  template <typename T>
  static void ForwardChannelsLast(const torch::Tensor& input, torch::Tensor& output,
                                  torch::Tensor& winners) {
    const int64_t channels = input.size(1), height = input.size(2), width = input.size(3);
    const int64_t out_height = output.size(2), out_width = output.size(3);
    const T* in = Elements<T>(input);
    T* out = Elements<T>(output);
    int32_t* win = winners.data_ptr<int32_t>();
    const int64_t row_grain = std::max<int64_t>(1, kGrainElements / (2 * width * channels));
    at::parallel_for(0, input.size(0) * out_height, row_grain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / out_height, oh = row % out_height;
        const T* top = in + (n * height + 2 * oh) * width * channels;
        const T* bottom = top + width * channels;
        for (int64_t ow = 0; ow < out_width; ++ow) {
          const int64_t left = 2 * ow * channels, right = left + channels;
          const int64_t at = (row * out_width + ow) * channels;
          ReluMaxPoolChannels(top + left, top + right, bottom + left, bottom + right, out + at,
                              win + at, channels);
        }
      }
    });
  }

  template <typename Bits>
  static void BackwardChannelsLast(const torch::Tensor& grad, const torch::Tensor& winners,
                                   torch::Tensor& grad_input) {
    const int64_t channels = grad.size(1), height = grad_input.size(2);
    const int64_t width = grad_input.size(3);
    const int64_t out_height = grad.size(2), out_width = grad.size(3);
    const Bits* in = static_cast<const Bits*>(grad.data_ptr());
    const int32_t* win = winners.data_ptr<int32_t>();
    Bits* out = static_cast<Bits*>(grad_input.data_ptr());
    const int64_t row_grain = std::max<int64_t>(1, kGrainElements / (2 * width * channels));
    at::parallel_for(0, grad.size(0) * out_height, row_grain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = row / out_height, oh = row % out_height;
        Bits* top = out + (n * height + 2 * oh) * width * channels;
        Bits* bottom = top + width * channels;
        for (int64_t ow = 0; ow < out_width; ++ow) {
          const int64_t left = 2 * ow * channels, right = left + channels;
          const int64_t at = (row * out_width + ow) * channels;
          ReluMaxPoolBackwardChannels(in + at, win + at, top + left, top + right, bottom + left,
                                      bottom + right, channels);
        }
      }
    });
  }
};

bool OwnKernelsApply(const torch::Tensor& input) {
  return input.device().is_cpu() &&
         (input.scalar_type() == torch::kFloat32 || input.scalar_type() == torch::kBFloat16);
}

torch::Tensor Relu(const torch::Tensor& input) {
  return OwnKernelsApply(input) ? ReluFunction::apply(input) : torch::relu(input);
}

// max_pool2d(relu(input), 2) for an (N, C, H, W) input, NCHW or NHWC in memory.
torch::Tensor ReluMaxPool2x2(const torch::Tensor& input) {
  if (!OwnKernelsApply(input) || input.dim() != 4) return torch::max_pool2d(torch::relu(input), 2);
  return ReluMaxPool2x2Function::apply(input);
}

// A copy of `tensor` laid out channels-last (NHWC) in memory, through which autograd carries the
// gradient back. Unlike tensor.contiguous(ChannelsLast), which keeps the strides of a tensor with
// one channel as they are, this gives every tensor channels-last strides, so that oneDNN sees
// the layout and picks its nhwc convolutions (Note [Why own kernels for ReLU and max-pool]).
torch::Tensor ChannelsLastCopy(const torch::Tensor& tensor) {
  return torch::empty_like(tensor, tensor.options(), at::MemoryFormat::ChannelsLast).copy_(tensor);
}

}  // namespace
}  // namespace dpl::convnet
