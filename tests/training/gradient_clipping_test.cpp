#include "training/gradient_clipping.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "torch_reference.hpp"

namespace dpl::training {
namespace {

using torch_reference::ExactText;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Gradients of several sizes (an empty one, a single element, sizes that are no multiple of the
// summation lanes), normally distributed with a different spread each.
std::vector<std::vector<float>> RandomGradients(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> gradients;
  float spread = 0.01f;
  for (size_t size : {size_t(1000), size_t(1), size_t(0), size_t(4097), size_t(30000), size_t(7)}) {
    std::vector<float> gradient(size);
    for (float& x : gradient) x = normal(rng) * spread;
    gradients.push_back(std::move(gradient));
    spread *= 3.0f;
  }
  return gradients;
}

std::vector<FloatSpan> Spans(std::vector<std::vector<float>>& gradients) {
  std::vector<FloatSpan> spans;
  for (std::vector<float>& g : gradients) spans.push_back({g.data(), g.size()});
  return spans;
}

class ClipGradNormParityTest : public ::testing::TestWithParam<double> {};

// Against torch.nn.utils.clip_grad_norm_ within float32 summation's rounding error, and bit for
// bit against the same clipping from a norm accumulated in float64 (which this one is).
TEST_P(ClipGradNormParityTest, MatchesTorch) {
  const double max_norm = GetParam();
  std::vector<std::vector<float>> gradients = RandomGradients(42);
  size_t elements = 0;
  const std::string base = torch_reference::ScratchPath("clip-grad-norm");
  {
    std::ofstream out(base + ".in", std::ios::binary);
    const int64_t count = int64_t(gradients.size());
    out.write(reinterpret_cast<const char*>(&count), 8);
    for (const auto& g : gradients) {
      const int64_t size = int64_t(g.size());
      out.write(reinterpret_cast<const char*>(&size), 8);
      elements += g.size();
    }
    for (const auto& g : gradients) torch_reference::WriteValues(out, g);
  }
  DPL_RUN_TORCH_REFERENCE("gradient_clipping_reference.py",
                          "clip " + base + ".in " + base + ".out " + ExactText(max_norm));
  std::ifstream in(base + ".out", std::ios::binary);
  const std::vector<float> norms = torch_reference::ReadValues<float>(in, 2);
  const std::vector<float> torch_clipped = torch_reference::ReadValues<float>(in, elements);
  const std::vector<float> float64_clipped = torch_reference::ReadValues<float>(in, elements);
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());
  ASSERT_EQ(norms.size(), 2u);
  ASSERT_EQ(float64_clipped.size(), elements);
  const float torch_norm = norms[0], float64_norm = norms[1];

  const float norm = ClipGradNorm(Spans(gradients), max_norm);
  EXPECT_EQ(Bits(norm), Bits(float64_norm)) << norm << " here, " << float64_norm << " in float64";
  // torch sums the squares in float32: a relative error that grows like sqrt(n) * 2^-24 for
  // randomly signed roundings, here with a margin of 4.
  const double tolerance = 4.0 * std::sqrt(double(elements)) * std::ldexp(1.0, -24);
  EXPECT_NEAR(norm, torch_norm, tolerance * torch_norm);
  const bool clipped = max_norm < norm;
  size_t i = 0;
  for (const auto& g : gradients) {
    for (float x : g) {
      ASSERT_EQ(Bits(x), Bits(float64_clipped[i])) << "element " << i;
      if (clipped) {
        ASSERT_NEAR(x, torch_clipped[i], 2.0 * tolerance * std::fabs(torch_clipped[i]) + 1e-30)
            << "element " << i;
      } else {
        ASSERT_EQ(Bits(x), Bits(torch_clipped[i])) << "element " << i;
      }
      ++i;
    }
  }
}

// Bounds that clip (the norm is about 141) and one that does not.
INSTANTIATE_TEST_SUITE_P(Torch, ClipGradNormParityTest, ::testing::Values(1.0, 50.5, 1e6),
                         [](const auto& info) { return "max_norm_" + std::to_string(info.index); });

// The clipping factor for norms over many magnitudes, against torch's float32 expression.
TEST(ClipCoefficient, MatchesTorchBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  std::vector<float> norms = {
      0.0f, 1e-7f, 0.7f - 1e-6f, 0.7f, 1.0f, 1e30f, std::numeric_limits<float>::infinity()};
  for (int i = 0; i < 3000; ++i) norms.push_back(std::pow(10.0f, exponent(rng)));
  const double max_norm = 0.7;
  const std::string base = torch_reference::ScratchPath("clip-coefficients");
  {
    std::ofstream out(base + ".in", std::ios::binary);
    torch_reference::WriteValues(out, norms);
  }
  DPL_RUN_TORCH_REFERENCE("gradient_clipping_reference.py",
                          "coefficients " + base + ".in " + base + ".out " + ExactText(max_norm));
  std::ifstream in(base + ".out", std::ios::binary);
  const std::vector<float> expected = torch_reference::ReadValues<float>(in, norms.size());
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());
  ASSERT_EQ(expected.size(), norms.size());
  for (size_t i = 0; i < norms.size(); ++i)
    ASSERT_EQ(Bits(ClipCoefficient(norms[i], max_norm)), Bits(expected[i]))
        << "norm " << ExactText(norms[i]) << ": " << ClipCoefficient(norms[i], max_norm)
        << " here, torch " << expected[i];
}

TEST(GradientNorm, IsTheSameBitsEveryTimeAndAtAnyAlignment) {
  std::vector<std::vector<float>> gradients = RandomGradients(7);
  const float first = GradientNorm(Spans(gradients));
  EXPECT_EQ(Bits(GradientNorm(Spans(gradients))), Bits(first));
  // The same values one float further into memory: lanes follow the index, not the address.
  std::vector<std::vector<float>> shifted_storage;
  std::vector<FloatSpan> shifted;
  for (const auto& g : gradients) {
    std::vector<float> storage(g.size() + 1, 0.0f);
    std::copy(g.begin(), g.end(), storage.begin() + 1);
    shifted_storage.push_back(std::move(storage));
  }
  for (size_t t = 0; t < gradients.size(); ++t)
    shifted.push_back({shifted_storage[t].data() + 1, gradients[t].size()});
  EXPECT_EQ(Bits(GradientNorm(shifted)), Bits(first));

  std::vector<std::vector<float>> copy = gradients;
  const float clipped_norm_a = ClipGradNorm(Spans(gradients), 0.5);
  const float clipped_norm_b = ClipGradNorm(Spans(copy), 0.5);
  EXPECT_EQ(Bits(clipped_norm_a), Bits(first));
  EXPECT_EQ(Bits(clipped_norm_b), Bits(first));
  for (size_t t = 0; t < gradients.size(); ++t)
    EXPECT_EQ(std::memcmp(gradients[t].data(), copy[t].data(), gradients[t].size() * 4), 0);
}

TEST(GradientNorm, IsTheNormOfTheNorms) {
  std::vector<std::vector<float>> gradients = {{3.0f, 4.0f}, {}, {-12.0f}};
  EXPECT_EQ(GradientNorm(Spans(gradients)), 13.0f);  // sqrt(5^2 + 12^2)
  EXPECT_EQ(GradientNorm({}), 0.0f);
  // Squares beyond float32 range are no trouble: accumulated in double.
  std::vector<std::vector<float>> large = {{3e30f, 4e30f}};
  EXPECT_FLOAT_EQ(GradientNorm(Spans(large)), 5e30f);
}

TEST(ClipGradNorm, ScalesByMaxNormOverNorm) {
  std::vector<std::vector<float>> gradients = {{3.0f, 4.0f}, {-12.0f}};
  EXPECT_EQ(ClipGradNorm(Spans(gradients), 6.5), 13.0f);
  const float coefficient = (1.0f / (13.0f + 1e-6f)) * 6.5f;
  EXPECT_EQ(ClipCoefficient(13.0f, 6.5), coefficient);
  EXPECT_FLOAT_EQ(coefficient, 0.5f);
  EXPECT_EQ(gradients[0][0], 3.0f * coefficient);
  EXPECT_EQ(gradients[0][1], 4.0f * coefficient);
  EXPECT_EQ(gradients[1][0], -12.0f * coefficient);
  // Under the bound: untouched.
  std::vector<std::vector<float>> small = {{3.0f, 4.0f}};
  EXPECT_EQ(ClipGradNorm(Spans(small), 5.1), 5.0f);
  EXPECT_EQ(ClipCoefficient(5.0f, 5.1), 1.0f);
  EXPECT_EQ(small[0], (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(ClipGradNorm({}, 1.0), 0.0f);
}

TEST(ClipGradNorm, NonFiniteGradientsGiveANonFiniteNormAsInTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> with_inf = {{1.0f, inf}, {2.0f}};
  EXPECT_EQ(ClipGradNorm(Spans(with_inf), 1.0), inf);
  // The factor is 0: finite values become 0, infinite ones NaN.
  EXPECT_EQ(with_inf[0][0], 0.0f);
  EXPECT_TRUE(std::isnan(with_inf[0][1]));
  EXPECT_EQ(with_inf[1][0], 0.0f);
  std::vector<std::vector<float>> with_nan = {{1.0f, std::nanf("")}};
  EXPECT_TRUE(std::isnan(ClipGradNorm(Spans(with_nan), 1.0)));
  EXPECT_TRUE(std::isnan(with_nan[0][0]));
}

}  // namespace
}  // namespace dpl::training
