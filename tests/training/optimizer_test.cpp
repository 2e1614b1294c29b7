#include "training/optimizer.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

namespace dpl::training {
namespace {

struct Case {
  const char* name;
  double learning_rate;
  double momentum;
};

class OptimizerParityTest : public ::testing::TestWithParam<Case> {};

// N steps on random data against python3 torch.optim, within 1e-6 relative.
TEST_P(OptimizerParityTest, MatchesTorch) {
  const Case c = GetParam();
  const int64_t elements = 1000, steps = 25;
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> params(elements);
  for (float& p : params) p = normal(rng);
  std::vector<std::vector<float>> grads(steps, std::vector<float>(elements));
  for (auto& g : grads)
    for (float& x : g) x = normal(rng) * 0.1f;

  const std::string base =
      std::string(DPL_TEST_BINARY_DIR) + "/optimizer-" + c.name + "-" + std::to_string(::getpid());
  {
    std::ofstream out(base + ".in", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&elements), 8);
    out.write(reinterpret_cast<const char*>(&steps), 8);
    out.write(reinterpret_cast<const char*>(params.data()), elements * 4);
    for (auto& g : grads) out.write(reinterpret_cast<const char*>(g.data()), elements * 4);
  }
  // python3-torch is a distribution package: prefer the system interpreter over any pyenv shim.
  const std::string python =
      ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const std::string command = python + " " + std::string(DPL_TEST_SOURCE_DIR) +
                              "/tests/training/optimizer_reference.py " + base + ".in " + base +
                              ".out " + c.name + " " + std::to_string(c.learning_rate) + " " +
                              std::to_string(c.momentum);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<float> expected(elements);
  std::ifstream(base + ".out", std::ios::binary)
      .read(reinterpret_cast<char*>(expected.data()), elements * 4);
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());

  OptimizerOptions options;
  options.name = c.name;
  options.learning_rate = c.learning_rate;
  options.momentum = c.momentum;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, {size_t(elements)});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  for (auto& g : grads) (*optimizer)->Step({params.data()}, {g.data()});
  EXPECT_EQ((*optimizer)->steps(), steps);
  for (int64_t i = 0; i < elements; ++i) {
    const float tolerance = 1e-6f * std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(params[i], expected[i], tolerance) << c.name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, OptimizerParityTest,
                         ::testing::Values(Case{"adadelta", 0.5, 0.0}, Case{"sgd", 0.1, 0.9},
                                           Case{"sgd", 0.1, 0.0}, Case{"adam", 0.01, 0.0}),
                         [](const auto& info) {
                           return std::string(info.param.name) +
                                  (info.param.momentum > 0 ? "_momentum" : "");
                         });

TEST(Optimizer, UnknownNameListsKnownOnes) {
  OptimizerOptions options;
  options.name = "lamb";
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, {4});
  ASSERT_FALSE(optimizer.ok());
  EXPECT_EQ(optimizer.status().message(),
            "unknown --optimizer 'lamb'; the known optimizers are adadelta, sgd, adam");
}

}  // namespace
}  // namespace dpl::training
