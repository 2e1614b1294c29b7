// The optimizer on the GPU against the same optimizer on the CPU, through the gpt plugin's C ABI
// only (no libtorch, no launcher library, so tools/gpu_check.sh builds it against pip torch's gpt
// plugin): 20 AdamW steps of the same gradients, with parameter groups and a gradient factor, must
// leave parameters within 1e-6 relative of the CPU's (||gpu - cpu|| / ||cpu||). Skipped, with the
// reason, without a CUDA device (and always with Debian's CPU-only libtorch). Also: the gradients
// of a backward after zero_gradients replace the old ones on CUDA too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "plugin_driver.hpp"
#include "support/relative_difference.hpp"

namespace dpl::device_optimizer_test {
namespace {

using dpl_test::Model;
using dpl_test::Plugin;

dpl_model_config_v4 GptConfig(int32_t device_type) {
  dpl_model_config_v4 config =
      dpl_test::WithTokens(dpl_test::Config("layers=2,heads=2,dim=32", 7), 16, 256);
  config.device_type = device_type;
  return config;
}

// Skips, saying why, where the gpt plugin cannot make a CUDA model.
class DeviceOptimizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dpl_model* probe = nullptr;
    if (Plugin("gpt").create(&cuda_config, &probe) != DPL_OK) {
      GTEST_SKIP() << "no CUDA device for the gpt plugin: " << Plugin("gpt").last_error();
    }
    Plugin("gpt").destroy(probe);
  }
  const dpl_model_config_v4 cuda_config = GptConfig(kDLCUDA);
};

TEST_F(DeviceOptimizer, CudaMatchesTheCpuAfterTwentyAdamWSteps) {
  const Model cpu(Plugin("gpt"), GptConfig(kDLCPU)), gpu(Plugin("gpt"), cuda_config);
  ASSERT_EQ(cpu.Values(), gpu.Values());
  const std::vector<double> decay = dpl_test::GroupDecay(cpu, 0.1);
  const uint64_t total = cpu.ParameterElements();
  const dpl_optimizer_config_v4 config =
      dpl_test::OptimizerConfig(DPL_OPTIMIZER_ADAMW, decay, total);
  for (const Model* model : {&cpu, &gpu}) {
    ASSERT_EQ(model->plugin().set_optimizer(model->get(), &config), DPL_OK) << model->error();
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int64_t step = 1; step <= 20; ++step) {
    std::vector<float> gradients(total);
    for (float& g : gradients) g = normal(rng);
    for (const Model* model : {&cpu, &gpu}) {
      ASSERT_EQ(model->plugin().write_tensors(model->get(), DPL_MODEL_TENSORS_GRADIENTS,
                                              gradients.data(), total),
                DPL_OK)
          << model->error();
      ASSERT_EQ(dpl_test::ApplyUpdate(*model, step, 0.01, 0.5), DPL_OK) << model->error();
    }
  }
  const std::vector<float> expected = cpu.Values(), got = gpu.Values();
  ASSERT_EQ(got.size(), expected.size());
  const double worst = dpl::testing::RelativeDifference(got, expected);  // ||gpu - cpu|| / ||cpu||
  std::cout << "the GPU's parameters after 20 AdamW steps: relative difference " << worst
            << " from the CPU's (" << total << " elements)\n";
  EXPECT_LE(worst, 1e-6);
}

// Token ids of a (2, 16) batch and the next ids as targets, as the tokens data set cuts them.
struct Tokens {
  std::vector<int64_t> ids, next;
  int64_t shape[2] = {2, 16};
  DLTensor input{}, target{};
  Tokens() {
    std::mt19937 rng(3);
    std::uniform_int_distribution<int64_t> id(0, 255);
    std::vector<int64_t> stream(2 * 17);
    for (int64_t& value : stream) value = id(rng);
    for (int64_t row = 0; row < 2; ++row) {
      for (int64_t t = 0; t < 16; ++t) {
        ids.push_back(stream[size_t(row * 17 + t)]);
        next.push_back(stream[size_t(row * 17 + t + 1)]);
      }
    }
    input = DLTensor{ids.data(), {kDLCPU, 0}, 2, {kDLInt, 64, 1}, shape, nullptr, 0};
    target = DLTensor{next.data(), {kDLCPU, 0}, 2, {kDLInt, 64, 1}, shape, nullptr, 0};
  }
};

// Note [Replaced gradients] on CUDA: after zero_gradients the next backward's gradients replace
// the old ones (copied into the flat buffer by the ready hook, on the gradient's stream).
TEST_F(DeviceOptimizer, CudaBackwardAfterZeroGradientsReplacesTheGradients) {
  const Model gpu(Plugin("gpt"), cuda_config);
  ASSERT_NE(gpu.Info().flags & DPL_MODEL_REPLACED_GRADIENTS, 0u);
  const Tokens batch;
  float loss = 0;
  ASSERT_EQ(gpu.plugin().train_step(gpu.get(), &batch.input, &batch.target, &loss), DPL_OK);
  const std::vector<float> once = gpu.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(gpu.plugin().train_step(gpu.get(), &batch.input, &batch.target, &loss), DPL_OK);
  ASSERT_EQ(gpu.plugin().zero_gradients(gpu.get()), DPL_OK);
  ASSERT_EQ(gpu.plugin().train_step(gpu.get(), &batch.input, &batch.target, &loss), DPL_OK);
  const std::vector<float> replaced = gpu.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(replaced.size(), once.size());
  double difference = 0, norm = 0;
  for (size_t i = 0; i < once.size(); ++i) {
    difference += std::fabs(double(replaced[i]) - double(once[i]));
    norm += std::fabs(double(once[i]));
  }
  EXPECT_GT(norm, 0.0);
  // The same batch twice on CUDA: equal but for the order of atomic sums.
  EXPECT_LE(difference, 1e-5 * norm) << "the gradients were added to, not replaced";
}

}  // namespace
}  // namespace dpl::device_optimizer_test
