#include "training/optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "torch_reference.hpp"
#include "training/lr_schedule.hpp"

namespace dpl::training {
namespace {

using torch_reference::ExactText;

struct Case {
  const char* label;
  const char* name;
  double learning_rate;
  double momentum;
  double weight_decay;
  const char* schedule;  // nullptr: a constant learning rate, set once
  int64_t warmup_steps;
};
// Names the case in test listings (gtest prints parameters as bytes otherwise).
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.label;
}

class OptimizerParityTest : public ::testing::TestWithParam<Case> {};

// N steps on random data against python3 torch.optim (with a torch.optim.lr_scheduler schedule
// where the case has one), within 1e-6 relative.
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

  LrScheduleOptions schedule_options;
  schedule_options.warmup_steps = c.warmup_steps;
  schedule_options.step_size = 4;
  schedule_options.gamma = 0.7;
  if (c.schedule != nullptr) {
    for (const auto& [name, kind] : LrScheduleNames()) {
      if (std::string(c.schedule) == name) schedule_options.kind = kind;
    }
  }

  const std::string base = torch_reference::ScratchPath(std::string("optimizer-") + c.label);
  {
    std::ofstream out(base + ".in", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&elements), 8);
    out.write(reinterpret_cast<const char*>(&steps), 8);
    out.write(reinterpret_cast<const char*>(params.data()), elements * 4);
    for (auto& g : grads) out.write(reinterpret_cast<const char*>(g.data()), elements * 4);
  }
  std::string arguments = base + ".in " + base + ".out " + c.name + " " +
                          ExactText(c.learning_rate) + " " + ExactText(c.momentum) + " " +
                          ExactText(c.weight_decay);
  if (c.schedule != nullptr)
    arguments += " " + std::string(c.schedule) + " " + std::to_string(c.warmup_steps) + " " +
                 std::to_string(schedule_options.step_size) + " " +
                 ExactText(schedule_options.gamma);
  DPL_RUN_TORCH_REFERENCE("optimizer_reference.py", arguments);
  std::vector<float> expected(elements);
  std::ifstream(base + ".out", std::ios::binary)
      .read(reinterpret_cast<char*>(expected.data()), elements * 4);
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());

  OptimizerOptions options;
  for (const auto& [name, kind] : OptimizerNames()) {
    if (std::string(c.name) == name) options.kind = kind;
  }
  options.learning_rate = c.learning_rate;
  options.momentum = c.momentum;
  options.weight_decay = c.weight_decay;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, {size_t(elements)});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  Result<LrSchedule> schedule = LrSchedule::Create(schedule_options, c.learning_rate, steps);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  for (auto& g : grads) {
    if (c.schedule != nullptr) (*optimizer)->set_learning_rate(schedule->learning_rate());
    (*optimizer)->Step({params.data()}, {g.data()});
    schedule->Advance();
  }
  EXPECT_EQ((*optimizer)->steps(), steps);
  for (int64_t i = 0; i < elements; ++i) {
    const float tolerance = 1e-6f * std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(params[i], expected[i], tolerance) << c.label << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Torch, OptimizerParityTest,
    ::testing::Values(Case{"adadelta", "adadelta", 0.5, 0.0, 0.0, nullptr, 0},
                      Case{"sgd_momentum", "sgd", 0.1, 0.9, 0.0, nullptr, 0},
                      Case{"sgd", "sgd", 0.1, 0.0, 0.0, nullptr, 0},
                      Case{"adam", "adam", 0.01, 0.0, 0.0, nullptr, 0},
                      Case{"adadelta_weight_decay", "adadelta", 0.5, 0.0, 0.05, nullptr, 0},
                      Case{"sgd_momentum_weight_decay", "sgd", 0.1, 0.9, 0.01, nullptr, 0},
                      Case{"sgd_weight_decay", "sgd", 0.1, 0.0, 0.3, nullptr, 0},
                      Case{"adam_weight_decay", "adam", 0.01, 0.0, 0.02, nullptr, 0},
                      Case{"adam_cosine_warmup", "adam", 0.01, 0.0, 0.0, "cosine", 5},
                      Case{"sgd_momentum_step_warmup", "sgd", 0.1, 0.9, 0.01, "step", 3},
                      Case{"adadelta_linear", "adadelta", 0.5, 0.0, 0.0, "linear", 0}),
    [](const auto& info) { return std::string(info.param.label); });

TEST(Optimizer, LearningRateStartsFromTheOptionsAndCanBeSet) {
  OptimizerOptions options;
  options.kind = OptimizerKind::kSgd;
  options.learning_rate = 0.25;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, {1});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  EXPECT_EQ((*optimizer)->learning_rate(), 0.25);
  float param = 1.0f;
  const float grad = 2.0f;
  (*optimizer)->Step({&param}, {&grad});
  EXPECT_EQ(param, 0.5f);  // 1 - 0.25 * 2
  (*optimizer)->set_learning_rate(0.125);
  (*optimizer)->Step({&param}, {&grad});
  EXPECT_EQ(param, 0.25f);  // 0.5 - 0.125 * 2
}

// The update split over the worker's threads (--threads-per-worker) gives the same bits on one
// thread and on several, for every optimizer, over buffers of sizes around the split points.
TEST(Optimizer, ThreadsChangeNoBit) {
  const std::vector<size_t> sizes = {1, 70000, 3, 131071, 40000};
  ThreadPool three(3), one(1);
  for (const OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdadelta, OptimizerKind::kAdam}) {
    OptimizerOptions options;
    options.kind = kind;
    options.momentum = 0.9;
    options.weight_decay = 0.01;
    std::vector<std::vector<float>> values[2], gradients;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (size_t n : sizes) {
      values[0].emplace_back(n);
      gradients.emplace_back(n);
      for (size_t i = 0; i < n; ++i) {
        values[0].back()[i] = normal(rng);
        gradients.back()[i] = normal(rng);
      }
    }
    values[1] = values[0];
    ThreadPool* pools[2] = {&one, &three};
    for (int run = 0; run < 2; ++run) {
      auto optimizer = CreateOptimizer(options, sizes);
      ASSERT_TRUE(optimizer.ok());
      (*optimizer)->set_threads(pools[run]);
      std::vector<float*> p;
      std::vector<const float*> g;
      for (size_t t = 0; t < sizes.size(); ++t) {
        p.push_back(values[run][t].data());
        g.push_back(gradients[t].data());
      }
      for (int step = 0; step < 3; ++step) (*optimizer)->Step(p, g);
    }
    EXPECT_EQ(values[0], values[1]) << NameOf(OptimizerNames(), kind);
  }
}

}  // namespace
}  // namespace dpl::training
