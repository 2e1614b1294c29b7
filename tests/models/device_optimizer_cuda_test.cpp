// The optimizer on the GPU against the same optimizer on the CPU, through the gpt plugin's C ABI
// only (no libtorch, no launcher library, so tools/gpu_check.sh builds it against pip torch's gpt
// plugin): 20 AdamW steps of the same gradients, with parameter groups and a gradient factor, must
// leave parameters within 1e-6 relative of the CPU's (||gpu - cpu|| / ||cpu||). Skipped, with the
// reason, without a CUDA device (and always with Debian's CPU-only libtorch).
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

TEST(DeviceOptimizer, CudaMatchesTheCpuAfterTwentyAdamWSteps) {
  dpl_model* probe = nullptr;
  const dpl_model_config_v4 cuda_config = GptConfig(kDLCUDA);
  if (Plugin("gpt").create(&cuda_config, &probe) != DPL_OK) {
    GTEST_SKIP() << "no CUDA device for the gpt plugin: " << Plugin("gpt").last_error();
  }
  Plugin("gpt").destroy(probe);
  const Model cpu(Plugin("gpt"), GptConfig(kDLCPU)), gpu(Plugin("gpt"), cuda_config);
  ASSERT_EQ(cpu.Values(), gpu.Values());
  std::vector<double> decay;  // nanoGPT's groups: tensors of two or more dimensions only
  uint64_t total = 0;
  for (const dpl_parameter_v2& parameter : cpu.Parameters()) {
    decay.push_back(parameter.value.ndim >= 2 ? 0.1 : 0.0);
    total += uint64_t(dpl_test::Elements(parameter.value));
  }
  dpl_optimizer_config_v4 config{};
  config.struct_size = sizeof config;
  config.kind = DPL_OPTIMIZER_ADAMW;
  config.beta1 = 0.9;
  config.beta2 = 0.95;
  config.eps = 1e-8;
  config.weight_decay = decay.data();
  config.shard_end = total;
  for (const Model* model : {&cpu, &gpu}) {
    ASSERT_EQ(model->plugin().set_optimizer(model->get(), &config), DPL_OK) << model->error();
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int64_t step = 1; step <= 20; ++step) {
    std::vector<float> gradients(total);
    for (float& g : gradients) g = normal(rng);
    dpl_update_v4 update{};
    update.struct_size = sizeof update;
    update.step = step;
    update.learning_rate = 0.01;
    update.gradient_factor = 0.5;
    for (const Model* model : {&cpu, &gpu}) {
      ASSERT_EQ(model->plugin().write_tensors(model->get(), DPL_MODEL_TENSORS_GRADIENTS,
                                              gradients.data(), total),
                DPL_OK)
          << model->error();
      ASSERT_EQ(model->plugin().apply_update(model->get(), &update), DPL_OK) << model->error();
    }
  }
  const std::vector<float> expected = cpu.Values(), got = gpu.Values();
  ASSERT_EQ(got.size(), expected.size());
  const double worst = dpl::testing::RelativeDifference(got, expected);  // ||gpu - cpu|| / ||cpu||
  std::cout << "the GPU's parameters after 20 AdamW steps: relative difference " << worst
            << " from the CPU's (" << total << " elements)\n";
  EXPECT_LE(worst, 1e-6);
}

}  // namespace
}  // namespace dpl::device_optimizer_test
