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
