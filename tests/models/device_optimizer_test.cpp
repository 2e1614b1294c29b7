// The optimizer where the parameters are (model ABI v4's set_optimizer, gradient_statistics,
// apply_update; the SDK's Note [Device optimizer]) through the C ABI, against the launcher's own
// host optimizer (training/optimizer.hpp, itself tested against torch.optim): the same gradients
// give the same parameters and state, step after step, for every kind, with parameter groups, a
// gradient factor and a shard; the statistics; and what it refuses. The GPU's update against
// this one is device_optimizer_cuda_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plugin_driver.hpp"
#include "support/relative_difference.hpp"
#include "training/optimizer.hpp"

namespace dpl::device_optimizer_test {
namespace {

using dpl::testing::RelativeDifference;
using dpl_test::ApplyUpdate;
using dpl_test::Model;
using dpl_test::Plugin;
using training::OptimizerKind;

// A small GPT: 2-D weights and embeddings, 1-D biases and norm weights (the groups rule).
dpl_model_config_v4 GptConfig(int32_t device_type = kDLCPU) {
  dpl_model_config_v4 config =
      dpl_test::WithTokens(dpl_test::Config("layers=1,heads=2,dim=16", 7), 8, 256);
  config.device_type = device_type;
  return config;
}

struct Kind {
  const char* label;
  OptimizerKind kind;
  dpl_optimizer_kind abi_kind;
  double learning_rate, momentum, weight_decay;
};
void PrintTo(const Kind& kind, std::ostream* out) {
  *out << kind.label;
}

// The tensors' sizes and whether the groups rule decays them.
struct Layout {
  std::vector<size_t> sizes;
  std::vector<bool> decayed;
  size_t total = 0;
};

Layout LayoutOf(const Model& model, OptimizerKind kind) {
  Layout layout;
  for (const dpl_parameter_v2& parameter : model.Parameters()) {
    layout.sizes.push_back(size_t(dpl_test::Elements(parameter.value)));
    layout.decayed.push_back(training::DecaysTensor(kind, false, parameter.value.ndim));
    layout.total += layout.sizes.back();
  }
  return layout;
}

dpl_optimizer_config_v4 AbiConfig(const Kind& kind, const Layout& layout,
                                  std::vector<double>* decay) {
  decay->clear();
  for (bool decayed : layout.decayed) decay->push_back(decayed ? kind.weight_decay : 0.0);
  dpl_optimizer_config_v4 config = dpl_test::OptimizerConfig(kind.abi_kind, *decay, layout.total);
  config.momentum = kind.momentum;
  if (kind.kind == OptimizerKind::kAdadelta) config.eps = 1e-6;
  return config;
}

std::unique_ptr<training::Optimizer> HostOptimizer(const Kind& kind, const Layout& layout) {
  training::OptimizerOptions options;
  options.kind = kind.kind;
  options.learning_rate = kind.learning_rate;
  options.momentum = kind.momentum;
  options.weight_decay = kind.weight_decay;
  options.adam_beta1 = 0.9;
  options.adam_beta2 = 0.95;
  options.adam_eps = 1e-8;
  std::vector<training::OptimizedTensor> tensors;
  for (size_t i = 0; i < layout.sizes.size(); ++i) {
    tensors.push_back({layout.sizes[i], bool(layout.decayed[i])});
  }
  return std::move(*training::CreateOptimizer(options, tensors));
}

std::vector<float> RandomGradients(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> gradients(count);
  for (float& g : gradients) g = normal(rng);
  return gradients;
}

void WriteGradients(const Model& model, const std::vector<float>& gradients) {
  ASSERT_EQ(model.plugin().write_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS, gradients.data(),
                                         gradients.size()),
            DPL_OK)
      << model.error();
}

std::vector<float> ReadState(const Model& model, size_t k, size_t count) {
  std::vector<float> state(count);
  const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + k);
  EXPECT_EQ(model.plugin().read_tensors(model.get(), which, state.data(), count), DPL_OK)
      << model.error();
  return state;
}

constexpr double kTolerance = 1e-6;

class DeviceOptimizerTest : public ::testing::TestWithParam<Kind> {};

// Eight steps of random gradients, the later ones scaled by a factor (an average, an unscale and
// a clip coefficient in one), on the model and on the host's optimizer.
TEST_P(DeviceOptimizerTest, MatchesTheHostOptimizerStepByStep) {
  const Kind& kind = GetParam();
  const Model model(Plugin("gpt"), GptConfig());
  ASSERT_NE(model.Info().flags & DPL_MODEL_DEVICE_OPTIMIZER, 0u);
  const Layout layout = LayoutOf(model, kind.kind);
  std::vector<double> decay;
  const dpl_optimizer_config_v4 config = AbiConfig(kind, layout, &decay);
  ASSERT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_OK) << model.error();
  std::unique_ptr<training::Optimizer> host = HostOptimizer(kind, layout);

  std::vector<float> values = model.Values();
  std::mt19937 rng(11);
  for (int64_t step = 1; step <= 8; ++step) {
    const double factor = step <= 4 ? 1.0 : 0.5;
    std::vector<float> gradients = RandomGradients(layout.total, rng);
    WriteGradients(model, gradients);
    ASSERT_EQ(ApplyUpdate(model, step, kind.learning_rate, factor), DPL_OK) << model.error();
    for (float& g : gradients) g = g * float(factor);
    std::vector<float*> value_pointers;
    std::vector<const float*> gradient_pointers;
    for (size_t i = 0, offset = 0; i < layout.sizes.size(); offset += layout.sizes[i++]) {
      value_pointers.push_back(values.data() + offset);
      gradient_pointers.push_back(gradients.data() + offset);
    }
    host->Step(value_pointers, gradient_pointers);
    EXPECT_LE(RelativeDifference(model.Values(), values), kTolerance) << "step " << step;
  }
  // The state, by state index, as the host's buffers hold it (parameters back to back).
  const std::vector<std::vector<float>*> buffers = host->StateBuffers();
  const size_t names = host->StateNames().size();
  const size_t held = kind.kind == OptimizerKind::kSgd && kind.momentum == 0.0 ? 0 : names;
  for (size_t k = 0; k < held; ++k) {
    std::vector<float> expected;
    for (size_t i = 0; i < layout.sizes.size(); ++i) {
      const std::vector<float>& buffer = *buffers[k * layout.sizes.size() + i];
      expected.insert(expected.end(), buffer.begin(), buffer.end());
    }
    EXPECT_LE(RelativeDifference(ReadState(model, k, layout.total), expected), kTolerance)
        << host->StateNames()[k];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, DeviceOptimizerTest,
    ::testing::Values(
        Kind{"Sgd", OptimizerKind::kSgd, DPL_OPTIMIZER_SGD, 0.1, 0.0, 0.0},
        Kind{"SgdMomentumDecay", OptimizerKind::kSgd, DPL_OPTIMIZER_SGD, 0.1, 0.9, 0.01},
        Kind{"Adam", OptimizerKind::kAdam, DPL_OPTIMIZER_ADAM, 0.01, 0.0, 0.01},
        Kind{"AdamWGroups", OptimizerKind::kAdamW, DPL_OPTIMIZER_ADAMW, 0.01, 0.0, 0.1},
        Kind{"Adadelta", OptimizerKind::kAdadelta, DPL_OPTIMIZER_ADADELTA, 1.0, 0.0, 0.01}),
    [](const ::testing::TestParamInfo<Kind>& info) { return info.param.label; });

const Kind kAdamW{"AdamW", OptimizerKind::kAdamW, DPL_OPTIMIZER_ADAMW, 0.01, 0.0, 0.1};

// A shard updates its elements exactly as the whole optimizer does and leaves the others; its
// state holds the shard's elements only, and write_tensors puts state back.
TEST(DeviceOptimizer, AShardUpdatesItsElementsOnly) {
  const Model whole(Plugin("gpt"), GptConfig()), part(Plugin("gpt"), GptConfig());
  const Layout layout = LayoutOf(whole, OptimizerKind::kAdamW);
  std::vector<double> decay;
  dpl_optimizer_config_v4 config = AbiConfig(kAdamW, layout, &decay);
  ASSERT_EQ(whole.plugin().set_optimizer(whole.get(), &config), DPL_OK) << whole.error();
  const size_t begin = layout.total / 3 + 5, end = 2 * layout.total / 3 + 1;
  config.shard_begin = begin;
  config.shard_end = end;
  ASSERT_EQ(part.plugin().set_optimizer(part.get(), &config), DPL_OK) << part.error();
  const std::vector<float> initial = part.Values();
  ASSERT_EQ(initial, whole.Values());
  std::mt19937 rng(3);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> gradients = RandomGradients(layout.total, rng);
    WriteGradients(whole, gradients);
    WriteGradients(part, gradients);
    ASSERT_EQ(ApplyUpdate(whole, step, 0.01, 1.0), DPL_OK) << whole.error();
    ASSERT_EQ(ApplyUpdate(part, step, 0.01, 1.0), DPL_OK) << part.error();
  }
  const std::vector<float> expected = whole.Values(), got = part.Values();
  for (size_t i = 0; i < layout.total; ++i) {
    const bool in_shard = i >= begin && i < end;
    ASSERT_EQ(got[i], in_shard ? expected[i] : initial[i]) << "element " << i;
  }
  const std::vector<float> exp_avg = ReadState(part, 0, end - begin);
  const std::vector<float> whole_exp_avg = ReadState(whole, 0, layout.total);
  EXPECT_TRUE(std::equal(exp_avg.begin(), exp_avg.end(), whole_exp_avg.begin() + long(begin)));
  // State written back is what is read.
  std::vector<float> written(end - begin);
  for (size_t i = 0; i < written.size(); ++i) written[i] = float(i) * 0.5f;
  const auto which = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + 1);
  ASSERT_EQ(part.plugin().write_tensors(part.get(), which, written.data(), written.size()), DPL_OK)
      << part.error();
  EXPECT_EQ(ReadState(part, 1, end - begin), written);
}

TEST(DeviceOptimizer, StatisticsAreTheSquaredNormAndFiniteness) {
  const Model model(Plugin("gpt"), GptConfig());
  const Layout layout = LayoutOf(model, OptimizerKind::kAdamW);
  std::mt19937 rng(5);
  std::vector<float> gradients = RandomGradients(layout.total, rng);
  WriteGradients(model, gradients);
  dpl_gradient_statistics_v4 statistics{};
  statistics.struct_size = sizeof statistics;
  ASSERT_EQ(model.plugin().gradient_statistics(model.get(), &statistics), DPL_OK) << model.error();
  double expected = 0.0;
  for (float g : gradients) expected += double(g) * double(g);
  EXPECT_NEAR(statistics.squared_norm, expected, expected * 1e-12);
  EXPECT_EQ(statistics.all_finite, 1u);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    gradients[layout.total / 2] = bad;
    WriteGradients(model, gradients);
    ASSERT_EQ(model.plugin().gradient_statistics(model.get(), &statistics), DPL_OK);
    EXPECT_EQ(statistics.all_finite, 0u) << bad;
  }
}

TEST(DeviceOptimizer, RefusesWhatItCannotRunNamingIt) {
  const Model model(Plugin("gpt"), GptConfig());
  EXPECT_EQ(ApplyUpdate(model, 1, 0.1, 1.0), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(model.error()).find("call set_optimizer first"), std::string::npos)
      << model.error();
  const Layout layout = LayoutOf(model, OptimizerKind::kAdamW);
  std::vector<double> decay;
  dpl_optimizer_config_v4 config = AbiConfig(kAdamW, layout, &decay);
  config.kind = 9;
  EXPECT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(model.error()).find("optimizer kind 9"), std::string::npos)
      << model.error();
  config.kind = DPL_OPTIMIZER_ADAMW;
  config.shard_end = layout.total + 1;
  EXPECT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(model.error()).find("is not within the " + std::to_string(layout.total)),
            std::string::npos)
      << model.error();
  config.shard_end = layout.total;
  ASSERT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_OK) << model.error();
  EXPECT_EQ(ApplyUpdate(model, 0, 0.1, 1.0), DPL_ERR_INVALID_ARGUMENT);
  std::vector<float> state(layout.total);
  const auto third = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE + 2);
  EXPECT_EQ(model.plugin().read_tensors(model.get(), third, state.data(), state.size()),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(model.error()).find("there is no state 2"), std::string::npos)
      << model.error();
  const auto first = static_cast<dpl_model_tensors>(DPL_MODEL_TENSORS_OPTIMIZER_STATE);
  EXPECT_EQ(model.plugin().read_tensors(model.get(), first, state.data(), state.size() - 1),
            DPL_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace dpl::device_optimizer_test
