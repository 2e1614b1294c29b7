#include "training/loss_scaler.hpp"

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

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

LossScaler MakeScaler(const LossScalerOptions& options = {}) {
  Result<LossScaler> scaler = LossScaler::Create(options);
  EXPECT_TRUE(scaler.ok()) << scaler.status().message();
  return std::move(scaler).value();
}

struct UpdateCase {
  const char* label;
  LossScalerOptions options;
  int steps;
  double non_finite_probability;
};
// Names the case in test listings (gtest prints parameters as bytes otherwise).
void PrintTo(const UpdateCase& c, std::ostream* out) {
  *out << c.label;
}

class LossScalerUpdateTest : public ::testing::TestWithParam<UpdateCase> {};

// The scale, growth tracker and decision after every step against GradScaler's update rule.
TEST_P(LossScalerUpdateTest, FollowsGradScalerUpdate) {
  const UpdateCase c = GetParam();
  std::mt19937 rng(99);
  std::bernoulli_distribution non_finite(c.non_finite_probability);
  std::string flags;
  for (int k = 0; k < c.steps; ++k) flags += non_finite(rng) ? '1' : '0';
  const std::string out = torch_reference::ScratchPath(std::string("loss-scaler-") + c.label);
  DPL_RUN_TORCH_REFERENCE("loss_scaler_reference.py",
                          "update " + out + " " + ExactText(c.options.init_scale) + " " +
                              ExactText(c.options.growth_factor) + " " +
                              ExactText(c.options.backoff_factor) + " " +
                              std::to_string(c.options.growth_interval) + " " + flags);
  struct Record {
    float scale;
    int32_t growth_tracker;
    int32_t skipped;
  };
  static_assert(sizeof(Record) == 12, "the reference writes 12 bytes a step");
  std::ifstream in(out, std::ios::binary);
  const std::vector<Record> expected = torch_reference::ReadValues<Record>(in, size_t(c.steps));
  std::remove(out.c_str());
  ASSERT_EQ(expected.size(), size_t(c.steps));

  LossScaler scaler = MakeScaler(c.options);
  EXPECT_EQ(scaler.scale(), float(c.options.init_scale));
  int growths = 0, skips = 0;
  for (int k = 0; k < c.steps; ++k) {
    const float before = scaler.scale();
    const StepDecision decision = scaler.Update(flags[size_t(k)] == '1');
    EXPECT_EQ(decision == StepDecision::kSkip, expected[size_t(k)].skipped != 0) << "step " << k;
    ASSERT_EQ(Bits(scaler.scale()), Bits(expected[size_t(k)].scale))
        << "step " << k << ": " << scaler.scale() << " here, " << expected[size_t(k)].scale;
    ASSERT_EQ(scaler.state().growth_tracker, expected[size_t(k)].growth_tracker) << "step " << k;
    growths += scaler.scale() > before;
    skips += decision == StepDecision::kSkip;
  }
  // The sequence exercised both rules.
  EXPECT_GT(growths, 0);
  EXPECT_GT(skips, 0);
}

LossScalerOptions Custom(double init_scale, double growth_factor, double backoff_factor,
                         int64_t growth_interval) {
  return LossScalerOptions{init_scale, growth_factor, backoff_factor, growth_interval};
}

INSTANTIATE_TEST_SUITE_P(
    Torch, LossScalerUpdateTest,
    ::testing::Values(UpdateCase{"defaults", LossScalerOptions{}, 9000, 0.0004},
                      // Factors whose products round in float32.
                      UpdateCase{"inexact_factors", Custom(1000.7, 3.0, 0.3, 7), 400, 0.15},
                      // Growth stops below float32's overflow.
                      UpdateCase{"near_overflow", Custom(1e37, 3.0, 0.5, 2), 60, 0.05}),
    [](const auto& info) { return std::string(info.param.label); });

struct UnscaleCase {
  const char* label;
  double scale;
  bool with_non_finite;
};
void PrintTo(const UnscaleCase& c, std::ostream* out) {
  *out << c.label;
}

class LossScalerUnscaleTest : public ::testing::TestWithParam<UnscaleCase> {};

// Unscaled values and the inf/NaN finding against GradScaler.unscale_'s arithmetic, bit for bit.
TEST_P(LossScalerUnscaleTest, MatchesGradScalerUnscale) {
  const UnscaleCase c = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> first(3001), second(17);
  for (float& x : first) x = normal(rng) * 3e4f;
  for (float& x : second) x = normal(rng) * 1e-3f;
  second[3] = std::numeric_limits<float>::max();
  second[4] = std::numeric_limits<float>::denorm_min();
  second[5] = -0.0f;
  if (c.with_non_finite) {
    first[2999] = kInf;
    second[9] = -kInf;
    second[11] = std::nanf("");
  }
  const std::string base = torch_reference::ScratchPath(std::string("unscale-") + c.label);
  {
    std::ofstream out(base + ".in", std::ios::binary);
    torch_reference::WriteValues(out, first);
    torch_reference::WriteValues(out, second);
  }
  DPL_RUN_TORCH_REFERENCE("loss_scaler_reference.py",
                          "unscale " + base + ".in " + base + ".out " + ExactText(c.scale));
  std::ifstream in(base + ".out", std::ios::binary);
  const std::vector<int32_t> found = torch_reference::ReadValues<int32_t>(in, 1);
  const std::vector<float> expected =
      torch_reference::ReadValues<float>(in, first.size() + second.size());
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(expected.size(), first.size() + second.size());

  LossScaler scaler = MakeScaler(Custom(c.scale, 2.0, 0.5, 2000));
  const std::vector<FloatSpan> gradients = {{first.data(), first.size()},
                                            {second.data(), second.size()}};
  EXPECT_EQ(LossScaler::FoundNonFinite(gradients), c.with_non_finite);
  EXPECT_EQ(scaler.Unscale(gradients), found[0] != 0);
  EXPECT_EQ(found[0] != 0, c.with_non_finite);
  for (size_t i = 0; i < expected.size(); ++i) {
    const float value = i < first.size() ? first[i] : second[i - first.size()];
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(value)) << "element " << i;
    } else {
      ASSERT_EQ(Bits(value), Bits(expected[i])) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Torch, LossScalerUnscaleTest,
    ::testing::Values(UnscaleCase{"default_scale", kDefaultLossScaleInit, false},
                      UnscaleCase{"default_scale_non_finite", kDefaultLossScaleInit, true},
                      UnscaleCase{"inexact_reciprocal", 1000.7, false},
                      UnscaleCase{"inexact_reciprocal_non_finite", 1000.7, true},
                      UnscaleCase{"scale_below_one", 0.3, false},
                      UnscaleCase{"scale_one", 1.0, true}),
    [](const auto& info) { return std::string(info.param.label); });

// GradScaler's documented behaviour with its defaults, by hand.
TEST(LossScaler, DefaultsGrowAfter2000CleanStepsAndHalveOnInf) {
  LossScaler scaler = MakeScaler();
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.inverse_scale(), 1.0f / 65536.0f);
  for (int k = 1; k < 2000; ++k) {
    ASSERT_EQ(scaler.Update(false), StepDecision::kApply);
    ASSERT_EQ(scaler.scale(), 65536.0f) << "clean step " << k;
    ASSERT_EQ(scaler.state().growth_tracker, k);
  }
  EXPECT_EQ(scaler.Update(false), StepDecision::kApply);  // the 2000th clean step
  EXPECT_EQ(scaler.scale(), 131072.0f);
  EXPECT_EQ(scaler.state().growth_tracker, 0);

  for (int k = 0; k < 500; ++k) ASSERT_EQ(scaler.Update(false), StepDecision::kApply);
  EXPECT_EQ(scaler.state().growth_tracker, 500);
  EXPECT_EQ(scaler.Update(true), StepDecision::kSkip);  // inf at this step: skip and halve
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  EXPECT_EQ(scaler.Update(true), StepDecision::kSkip);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  // The clean steps are counted again from the last skip.
  for (int k = 1; k < 2000; ++k) ASSERT_EQ(scaler.Update(false), StepDecision::kApply);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 65536.0f);
}

TEST(LossScaler, GrowthStopsBeforeFloatOverflow) {
  LossScaler scaler = MakeScaler(Custom(std::ldexp(1.0, 127), 2.0, 0.5, 1));
  EXPECT_EQ(scaler.Update(false), StepDecision::kApply);
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  EXPECT_EQ(scaler.Update(true), StepDecision::kSkip);
  EXPECT_EQ(scaler.scale(), std::ldexp(1.0f, 126));
}

TEST(LossScaler, FoundNonFiniteSeesInfAndNanOnly) {
  const float max = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> finite = {0.0f, -0.0f, max, -max, tiny, 1.0f, -3.5f, 1e-30f, 7.0f};
  std::vector<float> other(37, 1.0f);
  const std::vector<FloatSpan> clean = {{finite.data(), finite.size()}, {other.data(), 37}};
  EXPECT_FALSE(LossScaler::FoundNonFinite(clean));
  EXPECT_FALSE(LossScaler::FoundNonFinite({}));
  for (float bad : {kInf, -kInf, std::nanf(""), -std::nanf("")}) {
    for (size_t at : {size_t(0), size_t(36)}) {
      std::vector<float> copy = other;
      copy[at] = bad;
      EXPECT_TRUE(LossScaler::FoundNonFinite({{finite.data(), finite.size()}, {copy.data(), 37}}))
          << bad << " at " << at;
    }
  }
}

TEST(LossScaler, RestoredStateContinuesTheSameWay) {
  LossScalerOptions options = Custom(1000.7, 3.0, 0.3, 5);
  LossScaler running = MakeScaler(options);
  const std::string flags = "0001000000001100000000000100000000";
  for (size_t k = 0; k < 12; ++k) running.Update(flags[k] == '1');
  LossScaler resumed = MakeScaler(options);
  ASSERT_TRUE(resumed.Restore(running.state()).ok());
  for (size_t k = 12; k < flags.size(); ++k) {
    EXPECT_EQ(resumed.Update(flags[k] == '1'), running.Update(flags[k] == '1'));
    EXPECT_EQ(Bits(resumed.scale()), Bits(running.scale())) << "step " << k;
    EXPECT_EQ(resumed.state().growth_tracker, running.state().growth_tracker) << "step " << k;
  }
}

TEST(LossScaler, BadStateIsRefused) {
  LossScaler scaler = MakeScaler();
  Status status = scaler.Restore({0.0f, 0});
  EXPECT_EQ(status.code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status.message(), "the checkpoint's loss scale 0 is not a positive finite number");
  EXPECT_EQ(scaler.Restore({kInf, 0}).message(),
            "the checkpoint's loss scale inf is not a positive finite number");
  EXPECT_EQ(scaler.Restore({1024.0f, 2000}).message(),
            "the checkpoint's loss-scale growth tracker 2000 is outside [0, 2000), the range for "
            "--loss-scale-growth-interval 2000");
  EXPECT_EQ(scaler.scale(), 65536.0f);  // unchanged by the refusals
  ASSERT_TRUE(scaler.Restore({1024.0f, 1999}).ok());
  EXPECT_EQ(scaler.Update(false), StepDecision::kApply);
  EXPECT_EQ(scaler.scale(), 2048.0f);
}

TEST(LossScaler, BadOptionsAreRefusedNamingTheFlag) {
  const std::vector<std::pair<LossScalerOptions, std::string>> cases = {
      {Custom(0.0, 2.0, 0.5, 2000),
       "--loss-scale-init must be a positive number within float32 range (got 0)"},
      {Custom(1e39, 2.0, 0.5, 2000),
       "--loss-scale-init must be a positive number within float32 range (got 1e+39)"},
      {Custom(65536.0, 1.0, 0.5, 2000),
       "--loss-scale-growth-factor must be a finite number greater than 1 (got 1)"},
      {Custom(65536.0, 2.0, 1.0, 2000),
       "--loss-scale-backoff-factor must be greater than 0 and less than 1 (got 1)"},
      {Custom(65536.0, 2.0, 0.0, 2000),
       "--loss-scale-backoff-factor must be greater than 0 and less than 1 (got 0)"},
      {Custom(65536.0, 2.0, 0.5, 0),
       "--loss-scale-growth-interval must be between 1 and 2147483647 optimizer steps (got 0)"},
  };
  for (const auto& [options, message] : cases) {
    Result<LossScaler> scaler = LossScaler::Create(options);
    ASSERT_FALSE(scaler.ok()) << message;
    EXPECT_EQ(scaler.status().code(), DPL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(scaler.status().message(), message);
  }
}

}  // namespace
}  // namespace dpl::training
