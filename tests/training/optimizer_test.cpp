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

// Random parameters (normal) and per-step gradients (normal x 0.1), from `seed`.
struct Trajectory {
  std::vector<float> params;
  std::vector<std::vector<float>> grads;
};
Trajectory RandomTrajectory(int64_t elements, int64_t steps, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Trajectory t;
  t.params.resize(size_t(elements));
  for (float& p : t.params) p = normal(rng);
  t.grads.assign(size_t(steps), std::vector<float>(size_t(elements)));
  for (auto& g : t.grads)
    for (float& x : g) x = normal(rng) * 0.1f;
  return t;
}

// The parameters after optimizer_reference.py ran torch.optim over `t`, with `arguments` after
// the file names, into `expected`. The caller returns when the test was skipped (no torch) or
// failed.
void TorchFinalParameters(const std::string& label, const Trajectory& t,
                          const std::string& arguments, std::vector<float>* expected) {
  const std::string base = torch_reference::ScratchPath(label);
  const int64_t elements = int64_t(t.params.size()), steps = int64_t(t.grads.size());
  {
    std::ofstream out(base + ".in", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&elements), 8);
    out.write(reinterpret_cast<const char*>(&steps), 8);
    out.write(reinterpret_cast<const char*>(t.params.data()), elements * 4);
    for (auto& g : t.grads) out.write(reinterpret_cast<const char*>(g.data()), elements * 4);
  }
  DPL_RUN_TORCH_REFERENCE("optimizer_reference.py", base + ".in " + base + ".out " + arguments);
  expected->resize(size_t(elements));
  std::ifstream(base + ".out", std::ios::binary)
      .read(reinterpret_cast<char*>(expected->data()), elements * 4);
  std::remove((base + ".in").c_str());
  std::remove((base + ".out").c_str());
}

// Every element within 1e-6 relative of torch's.
void ExpectNearTorch(const std::vector<float>& params, const std::vector<float>& expected,
                     const std::string& label) {
  ASSERT_EQ(params.size(), expected.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const float tolerance = 1e-6f * std::max(1.0f, std::fabs(expected[i]));
    ASSERT_NEAR(params[i], expected[i], tolerance) << label << " element " << i;
  }
}

OptimizerKind KindNamed(const std::string& name) {
  for (const auto& [spelling, kind] : OptimizerNames()) {
    if (name == spelling) return kind;
  }
  ADD_FAILURE() << "no optimizer " << name;
  return OptimizerKind::kAdadelta;
}

class OptimizerParityTest : public ::testing::TestWithParam<Case> {};

// N steps on random data against python3 torch.optim (with a torch.optim.lr_scheduler schedule
// where the case has one), within 1e-6 relative.
TEST_P(OptimizerParityTest, MatchesTorch) {
  const Case c = GetParam();
  const int64_t elements = 1000, steps = 25;
  Trajectory t = RandomTrajectory(elements, steps, 1234);

  LrScheduleOptions schedule_options;
  schedule_options.warmup_steps = c.warmup_steps;
  schedule_options.step_size = 4;
  schedule_options.gamma = 0.7;
  if (c.schedule != nullptr) {
    for (const auto& [name, kind] : LrScheduleNames()) {
      if (std::string(c.schedule) == name) schedule_options.kind = kind;
    }
  }
  std::string arguments = std::string(c.name) + " " + ExactText(c.learning_rate) + " " +
                          ExactText(c.momentum) + " " + ExactText(c.weight_decay);
  if (c.schedule != nullptr)
    arguments += " " + std::string(c.schedule) + " " + std::to_string(c.warmup_steps) + " " +
                 std::to_string(schedule_options.step_size) + " " +
                 ExactText(schedule_options.gamma);
  std::vector<float> expected;
  TorchFinalParameters(std::string("optimizer-") + c.label, t, arguments, &expected);
  if (IsSkipped() || HasFatalFailure()) return;

  OptimizerOptions options;
  options.kind = KindNamed(c.name);
  options.learning_rate = c.learning_rate;
  options.momentum = c.momentum;
  options.weight_decay = c.weight_decay;
  Result<std::unique_ptr<Optimizer>> optimizer =
      CreateOptimizer(options, {{size_t(elements), true}});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  Result<LrSchedule> schedule = LrSchedule::Create(schedule_options, c.learning_rate, steps);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  for (auto& g : t.grads) {
    if (c.schedule != nullptr) (*optimizer)->set_learning_rate(schedule->learning_rate());
    (*optimizer)->Step({t.params.data()}, {g.data()});
    schedule->Advance();
  }
  EXPECT_EQ((*optimizer)->steps(), steps);
  ExpectNearTorch(t.params, expected, c.label);
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

// A parameter group case (Note [Weight decay groups]): tensors of several shapes, Adam's and
// AdamW's betas and eps, nanoGPT's two groups or torch's one.
struct GroupCase {
  const char* label;
  const char* name;
  double learning_rate;
  double weight_decay;
  double beta1, beta2, eps;
  bool decay_all;
  const char* schedule;  // nullptr: a constant learning rate
};
void PrintTo(const GroupCase& c, std::ostream* out) {
  *out << c.label;
}

// 12x10 (a linear weight), 10 (its bias), 3x4x5 (a convolution's), 7 (a norm weight).
const std::vector<std::vector<int64_t>> kGroupShapes = {{12, 10}, {10}, {3, 4, 5}, {7}};

class GroupParityTest : public ::testing::TestWithParam<GroupCase> {};

// The optimizer's tensors of kGroupShapes for `kind`, and the shapes as the reference takes them.
std::vector<OptimizedTensor> GroupTensors(OptimizerKind kind, bool decay_all, std::string* shapes) {
  std::vector<OptimizedTensor> tensors;
  for (const std::vector<int64_t>& shape : kGroupShapes) {
    size_t elements = 1;
    std::string text;
    for (int64_t d : shape) {
      elements *= size_t(d);
      text += (text.empty() ? "" : "x") + std::to_string(d);
    }
    tensors.push_back({elements, DecaysTensor(kind, decay_all, int(shape.size()))});
    *shapes += (shapes->empty() ? "" : ",") + text;
  }
  return tensors;
}

// 25 steps on random data against python3 torch.optim with torch's param groups, within 1e-6
// relative: torch.optim.AdamW with nanoGPT's two groups is what --optimizer adamw computes.
TEST_P(GroupParityTest, MatchesTorchParamGroups) {
  const GroupCase c = GetParam();
  std::string shapes;
  const std::vector<OptimizedTensor> tensors =
      GroupTensors(KindNamed(c.name), c.decay_all, &shapes);
  EXPECT_EQ(tensors[1].decayed, std::string(c.name) != "adamw" || c.decay_all);
  int64_t elements = 0;
  for (const OptimizedTensor& tensor : tensors) elements += int64_t(tensor.elements);
  const int64_t steps = 25;
  Trajectory t = RandomTrajectory(elements, steps, 99);
  LrScheduleOptions schedule_options;
  schedule_options.warmup_steps = 5;
  std::string arguments =
      std::string(c.name) + " " + ExactText(c.learning_rate) + " 0 " + ExactText(c.weight_decay);
  if (c.schedule != nullptr) {
    schedule_options.kind = LrScheduleKind::kCosine;
    arguments += std::string(" ") + c.schedule + " 5 1 0.1";
  }
  arguments += " betas=" + ExactText(c.beta1) + "," + ExactText(c.beta2) +
               " eps=" + ExactText(c.eps) + " shapes=" + shapes +
               (tensors[1].decayed ? " groups=all" : " groups=nanogpt");
  std::vector<float> expected;
  TorchFinalParameters(std::string("groups-") + c.label, t, arguments, &expected);
  if (IsSkipped() || HasFatalFailure()) return;

  OptimizerOptions options;
  options.kind = KindNamed(c.name);
  options.learning_rate = c.learning_rate;
  options.weight_decay = c.weight_decay;
  options.adam_beta1 = c.beta1;
  options.adam_beta2 = c.beta2;
  options.adam_eps = c.eps;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, tensors);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  Result<LrSchedule> schedule = LrSchedule::Create(schedule_options, c.learning_rate, steps);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  for (auto& g : t.grads) {
    std::vector<float*> values;
    std::vector<const float*> sums;
    for (size_t i = 0, offset = 0; i < tensors.size(); offset += tensors[i++].elements) {
      values.push_back(t.params.data() + offset);
      sums.push_back(g.data() + offset);
    }
    if (c.schedule != nullptr) (*optimizer)->set_learning_rate(schedule->learning_rate());
    (*optimizer)->Step(values, sums);
    schedule->Advance();
  }
  ExpectNearTorch(t.params, expected, c.label);
}

INSTANTIATE_TEST_SUITE_P(
    Torch, GroupParityTest,
    ::testing::Values(
        GroupCase{"adamw_nanogpt_groups", "adamw", 0.01, 0.1, 0.9, 0.95, 1e-8, false, nullptr},
        GroupCase{"adamw_decay_all", "adamw", 0.01, 0.1, 0.9, 0.999, 1e-8, true, nullptr},
        GroupCase{"adamw_no_decay", "adamw", 0.003, 0.0, 0.9, 0.999, 1e-8, false, nullptr},
        GroupCase{"adamw_groups_cosine_warmup", "adamw", 0.02, 0.05, 0.8, 0.99, 1e-6, false,
                  "cosine"},
        GroupCase{"adam_betas_eps", "adam", 0.01, 0.01, 0.5, 0.9, 1e-4, false, nullptr},
        GroupCase{"sgd_decays_every_tensor", "sgd", 0.1, 0.2, 0.9, 0.999, 1e-8, false, nullptr}),
    [](const auto& info) { return std::string(info.param.label); });

// What a sharded optimizer does: each tensor updated in slices, in another order, gives the bits
// of one Step.
TEST(Optimizer, SlicesInAnyOrderGiveTheBitsOfOneStep) {
  for (const auto& [name, kind] : OptimizerNames()) {
    OptimizerOptions options;
    options.kind = kind;
    options.learning_rate = 0.01;
    options.momentum = 0.9;
    options.weight_decay = 0.05;
    const std::vector<OptimizedTensor> tensors = {{1000, true}, {37, false}, {256, true}};
    auto whole = CreateOptimizer(options, tensors);
    auto sliced = CreateOptimizer(options, tensors);
    ASSERT_TRUE(whole.ok() && sliced.ok());
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> a, b, g;
    for (const OptimizedTensor& t : tensors) {
      a.emplace_back(t.elements);
      g.emplace_back(t.elements);
      for (float& x : a.back()) x = normal(rng);
    }
    b = a;
    for (int step = 0; step < 3; ++step) {
      for (auto& tensor : g)
        for (float& x : tensor) x = normal(rng) * 0.1f;
      (*whole)->Step({a[0].data(), a[1].data(), a[2].data()},
                     {g[0].data(), g[1].data(), g[2].data()});
      (*sliced)->BeginStep();
      for (size_t t = tensors.size(); t-- > 0;) {
        const size_t half = tensors[t].elements / 2;
        (*sliced)->UpdateSlice(t, half, tensors[t].elements - half, b[t].data() + half,
                               g[t].data() + half);
        (*sliced)->UpdateSlice(t, 0, half, b[t].data(), g[t].data());
      }
      (*sliced)->EndStep();
    }
    EXPECT_EQ((*sliced)->steps(), 3) << name;
    EXPECT_TRUE(a == b) << name;
  }
}

TEST(Optimizer, AdamwDecaysTheParametersNotTheGradients) {
  // One step of AdamW from a zero gradient moves a decayed parameter by lr*wd*p alone, and an
  // undecayed one not at all: Adam would add wd*p to the gradient instead and move both by lr.
  OptimizerOptions options;
  options.kind = OptimizerKind::kAdamW;
  options.learning_rate = 0.1;
  options.weight_decay = 0.5;
  auto optimizer = CreateOptimizer(options, {{1, true}, {1, false}});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().message();
  float decayed = 2.0f, kept = 2.0f;
  const float zero = 0.0f;
  (*optimizer)->Step({&decayed, &kept}, {&zero, &zero});
  EXPECT_EQ(decayed, 2.0f * float(1.0 - 0.1 * 0.5));  // 1.9
  EXPECT_EQ(kept, 2.0f);
  EXPECT_TRUE(DecaysTensor(OptimizerKind::kAdamW, false, 2));
  EXPECT_FALSE(DecaysTensor(OptimizerKind::kAdamW, false, 1));
  EXPECT_FALSE(DecaysTensor(OptimizerKind::kAdamW, false, 0));
  EXPECT_TRUE(DecaysTensor(OptimizerKind::kAdamW, true, 1));
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdadelta}) {
    EXPECT_TRUE(DecaysTensor(kind, false, 1));
  }
}

TEST(Optimizer, LearningRateStartsFromTheOptionsAndCanBeSet) {
  OptimizerOptions options;
  options.kind = OptimizerKind::kSgd;
  options.learning_rate = 0.25;
  Result<std::unique_ptr<Optimizer>> optimizer = CreateOptimizer(options, {{1, true}});
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
  for (const OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kAdadelta,
                                   OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
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
      std::vector<OptimizedTensor> tensors;  // every other tensor decayed (AdamW's groups)
      for (size_t t = 0; t < sizes.size(); ++t) tensors.push_back({sizes[t], t % 2 == 0});
      auto optimizer = CreateOptimizer(options, tensors);
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
