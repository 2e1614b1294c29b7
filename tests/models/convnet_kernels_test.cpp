// The ConvNet's own CPU kernels (models/convnet/fused_ops.hpp) against libtorch's operators, in
// float32 and bfloat16: the same values, the same winners on ties, the same gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "fused_ops.hpp"

namespace {

// Values on a coarse grid, so that windows have ties, zeros and negative maxima; some NaNs.
torch::Tensor Activations(c10::IntArrayRef sizes, torch::ScalarType type, bool with_nan) {
  torch::manual_seed(17);
  torch::Tensor values = torch::round(torch::randn(sizes) * 2.0) / 2.0;
  if (with_nan) {
    values.view(-1).index_put_({torch::arange(0, values.numel(), 37)},
                               std::numeric_limits<float>::quiet_NaN());
  }
  return values.to(type);
}

// Equal, NaN where the other is NaN.
void ExpectSame(const torch::Tensor& ours, const torch::Tensor& reference,
                const std::string& what) {
  ASSERT_EQ(ours.scalar_type(), reference.scalar_type()) << what;
  ASSERT_EQ(ours.sizes(), reference.sizes()) << what;
  EXPECT_TRUE(torch::equal(torch::isnan(ours), torch::isnan(reference))) << what;
  const torch::Tensor finite = ~torch::isnan(reference);
  EXPECT_TRUE(torch::equal(ours.masked_select(finite), reference.masked_select(finite))) << what;
}

class Kernels : public ::testing::TestWithParam<std::tuple<torch::ScalarType, bool>> {};

TEST_P(Kernels, ReluMaxPoolMatchesLibtorchForwardAndBackward) {
  const auto [type, with_nan] = GetParam();
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{4, 8, 24, 24}, std::vector<int64_t>{3, 5, 7, 9}}) {
    const std::string what =
        std::string(c10::toString(type)) + " " + c10::str(sizes) + (with_nan ? " with NaN" : "");
    const torch::Tensor input = Activations(sizes, type, with_nan);
    const torch::Tensor ours_input = input.clone().requires_grad_(true);
    const torch::Tensor reference_input = input.clone().requires_grad_(true);
    const torch::Tensor ours = dpl::convnet::ReluMaxPool2x2(ours_input);
    const torch::Tensor reference = torch::max_pool2d(torch::relu(reference_input), 2);
    ExpectSame(ours, reference, what + " forward");
    const torch::Tensor grad = torch::randn(ours.sizes()).to(type);
    ours.backward(grad);
    reference.backward(grad);
    if (!with_nan) {  // libtorch sends no gradient through a NaN maximum either way; skip NaNs
      ExpectSame(ours_input.grad(), reference_input.grad(), what + " backward");
    }
  }
}

// The channels-last (NHWC) kernel: the same values and gradients as libtorch on the same NHWC
// input, the output and the gradient NHWC too, as libtorch's are.
TEST_P(Kernels, ChannelsLastReluMaxPoolMatchesLibtorchForwardAndBackward) {
  const auto [type, with_nan] = GetParam();
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{4, 32, 24, 24}, std::vector<int64_t>{3, 5, 7, 9}}) {
    const std::string what = std::string(c10::toString(type)) + " NHWC " + c10::str(sizes) +
                             (with_nan ? " with NaN" : "");
    const torch::Tensor input =
        Activations(sizes, type, with_nan).contiguous(at::MemoryFormat::ChannelsLast);
    ASSERT_FALSE(input.is_contiguous()) << what;
    const torch::Tensor ours_input = input.clone().requires_grad_(true);
    const torch::Tensor reference_input = input.clone().requires_grad_(true);
    const torch::Tensor ours = dpl::convnet::ReluMaxPool2x2(ours_input);
    const torch::Tensor reference = torch::max_pool2d(torch::relu(reference_input), 2);
    EXPECT_TRUE(ours.is_contiguous(at::MemoryFormat::ChannelsLast)) << what;
    ExpectSame(ours, reference, what + " forward");
    // The gradient arrives NCHW, as it does from flatten's backward in the model.
    const torch::Tensor grad = torch::randn(ours.sizes()).to(type);
    ours.backward(grad);
    reference.backward(grad);
    EXPECT_TRUE(ours_input.grad().is_contiguous(at::MemoryFormat::ChannelsLast)) << what;
    if (!with_nan) {
      ExpectSame(ours_input.grad(), reference_input.grad(), what + " backward");
    }
  }
}

// The NHWC kernel picks the same winners as the NCHW one on the same values, NaNs included: the
// gradients of the two agree element for element.
TEST_P(Kernels, ChannelsLastAndPlanarKernelsAgree) {
  const auto [type, with_nan] = GetParam();
  const torch::Tensor input = Activations({2, 16, 10, 12}, type, with_nan);
  const torch::Tensor planar = input.clone().requires_grad_(true);
  const torch::Tensor channels_last =
      input.contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
  const torch::Tensor planar_out = dpl::convnet::ReluMaxPool2x2(planar);
  const torch::Tensor channels_last_out = dpl::convnet::ReluMaxPool2x2(channels_last);
  ExpectSame(channels_last_out.contiguous(), planar_out, "forward");
  const torch::Tensor grad = torch::randn(planar_out.sizes()).to(type);
  planar_out.backward(grad);
  channels_last_out.backward(grad);
  EXPECT_TRUE(torch::equal(channels_last.grad().contiguous(), planar.grad()));
}

TEST_P(Kernels, ChannelsLastReluBackwardMatchesLibtorch) {
  const auto [type, with_nan] = GetParam();
  const torch::Tensor input =
      Activations({3, 16, 5, 6}, type, with_nan).contiguous(at::MemoryFormat::ChannelsLast);
  const torch::Tensor ours_input = input.clone().requires_grad_(true);
  const torch::Tensor reference_input = input.clone().requires_grad_(true);
  const torch::Tensor ours = dpl::convnet::Relu(ours_input);
  const torch::Tensor reference = torch::relu(reference_input);
  ExpectSame(ours, reference, "relu forward");
  const torch::Tensor grad = torch::randn(ours.sizes()).to(type);  // NCHW, unlike the output
  ours.backward(grad);
  reference.backward(grad);
  if (!with_nan) ExpectSame(ours_input.grad(), reference_input.grad(), "relu backward");
}

// ChannelsLastCopy gives NHWC strides even to a one-channel tensor, which .contiguous(ChannelsLast)
// leaves as it is, and autograd carries the gradient back to the NCHW original.
TEST(Kernels, ChannelsLastCopyHasNhwcStridesAndPassesGradients) {
  const torch::Tensor weight = torch::randn({16, 1, 3, 3}).requires_grad_(true);
  const torch::Tensor copy = dpl::convnet::ChannelsLastCopy(weight);
  EXPECT_EQ(copy.strides(), (std::vector<int64_t>{9, 1, 3, 1}));
  EXPECT_EQ(weight.contiguous(at::MemoryFormat::ChannelsLast).strides(),
            (std::vector<int64_t>{9, 9, 3, 1}));
  EXPECT_TRUE(torch::equal(copy, weight));
  const torch::Tensor grad = torch::randn({16, 1, 3, 3});
  copy.backward(grad);
  EXPECT_TRUE(torch::equal(weight.grad(), grad));
}

TEST_P(Kernels, ReluBackwardMatchesLibtorch) {
  const auto [type, with_nan] = GetParam();
  const torch::Tensor input = Activations({6, 64}, type, with_nan);
  const torch::Tensor ours_input = input.clone().requires_grad_(true);
  const torch::Tensor reference_input = input.clone().requires_grad_(true);
  const torch::Tensor ours = dpl::convnet::Relu(ours_input);
  const torch::Tensor reference = torch::relu(reference_input);
  ExpectSame(ours, reference, "relu forward");
  const torch::Tensor grad = torch::randn(ours.sizes()).to(type);
  ours.backward(grad);
  reference.backward(grad);
  if (!with_nan) ExpectSame(ours_input.grad(), reference_input.grad(), "relu backward");
}

INSTANTIATE_TEST_SUITE_P(Float32AndBfloat16, Kernels,
                         ::testing::Combine(::testing::Values(torch::kFloat32, torch::kBFloat16),
                                            ::testing::Bool()));

// A bfloat16 activation takes the fused path, not libtorch's (which the old dtype check did).
TEST(Kernels, Bfloat16TakesTheFusedPath) {
  const torch::Tensor input =
      Activations({2, 4, 8, 8}, torch::kBFloat16, false).requires_grad_(true);
  const torch::Tensor output = dpl::convnet::ReluMaxPool2x2(input);
  ASSERT_NE(output.grad_fn(), nullptr);
  EXPECT_NE(output.grad_fn()->name().find("ReluMaxPool2x2Function"), std::string::npos)
      << output.grad_fn()->name();
  EXPECT_NE(dpl::convnet::Relu(input).grad_fn()->name().find("ReluFunction"), std::string::npos);
}

}  // namespace
