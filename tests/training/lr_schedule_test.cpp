#include "training/lr_schedule.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "torch_reference.hpp"

namespace dpl::training {
namespace {

using torch_reference::ExactText;

constexpr int64_t kTotalSteps = 60;
constexpr double kBaseRate = 0.1;

LrScheduleKind KindNamed(const std::string& name) {
  for (const auto& [spelling, kind] : LrScheduleNames()) {
    if (name == spelling) return kind;
  }
  ADD_FAILURE() << "no schedule is named " << name;
  return LrScheduleKind::kConstant;
}

std::string NameOf(const LrScheduleOptions& options) {
  return training::NameOf(LrScheduleNames(), options.kind);
}

LrScheduleOptions Options(const std::string& name, int64_t warmup_steps) {
  LrScheduleOptions options;
  options.kind = KindNamed(name);
  options.warmup_steps = warmup_steps;
  options.step_size = 9;
  options.gamma = 0.7;
  return options;
}

uint64_t Bits(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

std::string RatesPath(const LrScheduleOptions& options) {
  return torch_reference::ScratchPath("lr-schedule-" + NameOf(options)) + ".out";
}

// The arguments of lr_schedule_reference.py for the first `count` rates of the schedule.
std::string ReferenceArguments(const LrScheduleOptions& options, int64_t count) {
  return RatesPath(options) + " " + NameOf(options) + " " + ExactText(kBaseRate) + " " +
         std::to_string(kTotalSteps) + " " + std::to_string(options.warmup_steps) + " " +
         std::to_string(options.step_size) + " " + ExactText(options.gamma) + " " +
         std::to_string(count);
}

// The rates the reference wrote; empty when there are fewer than `count`.
std::vector<double> ReadRates(const LrScheduleOptions& options, int64_t count) {
  const std::string path = RatesPath(options);
  std::ifstream in(path, std::ios::binary);
  std::vector<double> rates = torch_reference::ReadValues<double>(in, size_t(count));
  std::remove(path.c_str());
  return rates;
}

// Rates of steps `from` .. `count`-1 equal torch's bit for bit.
void ExpectSameRates(LrSchedule* schedule, const std::vector<double>& expected, int64_t from) {
  for (int64_t step = from; step < int64_t(expected.size()); ++step) {
    ASSERT_EQ(schedule->step(), step);
    EXPECT_EQ(Bits(schedule->learning_rate()), Bits(expected[size_t(step)]))
        << "optimizer step " << step << ": " << ExactText(schedule->learning_rate())
        << " here, torch " << ExactText(expected[size_t(step)]);
    schedule->Advance();
  }
}

struct ScheduleCase {
  const char* name;
  int64_t warmup_steps;
};
// Names the case in test listings (gtest prints parameters as bytes otherwise).
void PrintTo(const ScheduleCase& c, std::ostream* out) {
  *out << c.name << " warmup " << c.warmup_steps;
}

class LrScheduleParityTest : public ::testing::TestWithParam<ScheduleCase> {};

// Every optimizer step of a 60-step run, against torch.optim.lr_scheduler, bit for bit.
TEST_P(LrScheduleParityTest, MatchesTorchBitForBit) {
  const LrScheduleOptions options = Options(GetParam().name, GetParam().warmup_steps);
  DPL_RUN_TORCH_REFERENCE("lr_schedule_reference.py", ReferenceArguments(options, kTotalSteps));
  const std::vector<double> expected = ReadRates(options, kTotalSteps);
  ASSERT_EQ(expected.size(), size_t(kTotalSteps));

  Result<LrSchedule> schedule = LrSchedule::Create(options, kBaseRate, kTotalSteps);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  ExpectSameRates(&*schedule, expected, 0);
}

INSTANTIATE_TEST_SUITE_P(Torch, LrScheduleParityTest,
                         ::testing::Values(ScheduleCase{"constant", 0}, ScheduleCase{"constant", 7},
                                           ScheduleCase{"step", 0}, ScheduleCase{"step", 7},
                                           ScheduleCase{"cosine", 0}, ScheduleCase{"cosine", 7},
                                           ScheduleCase{"linear", 0}, ScheduleCase{"linear", 7}),
                         [](const auto& info) {
                           return std::string(info.param.name) +
                                  (info.param.warmup_steps > 0 ? "_warmup" : "");
                         });

struct ResumeCase {
  const char* label;
  const char* name;
  int64_t warmup_steps;
  int64_t resume_at;
};
void PrintTo(const ResumeCase& c, std::ostream* out) {
  *out << c.name << " warmup " << c.warmup_steps << " resumed at " << c.resume_at;
}

class LrScheduleResumeTest : public ::testing::TestWithParam<ResumeCase> {};

// A schedule restored at step k continues with torch's rates of an uninterrupted run.
TEST_P(LrScheduleResumeTest, ContinuesAsIfNeverStopped) {
  const ResumeCase c = GetParam();
  const LrScheduleOptions options = Options(c.name, c.warmup_steps);
  DPL_RUN_TORCH_REFERENCE("lr_schedule_reference.py", ReferenceArguments(options, kTotalSteps));
  const std::vector<double> expected = ReadRates(options, kTotalSteps);
  ASSERT_EQ(expected.size(), size_t(kTotalSteps));

  // A schedule that has run somewhere else: restored from step 0 and from a later step.
  Result<LrSchedule> resumed = LrSchedule::Create(options, kBaseRate, kTotalSteps);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  for (int i = 0; i < 45; ++i) resumed->Advance();
  ASSERT_TRUE(resumed->Restore(c.resume_at).ok());
  ExpectSameRates(&*resumed, expected, c.resume_at);
}

INSTANTIATE_TEST_SUITE_P(Torch, LrScheduleResumeTest,
                         ::testing::Values(ResumeCase{"in_warmup", "cosine", 7, 4},
                                           ResumeCase{"at_warmup_end", "linear", 7, 7},
                                           ResumeCase{"in_cosine", "cosine", 0, 30},
                                           ResumeCase{"in_cosine_after_warmup", "cosine", 7, 33},
                                           ResumeCase{"in_step", "step", 7, 25}),
                         [](const auto& info) { return std::string(info.param.label); });

// Rates checked by hand, without torch: each is exact in binary.
TEST(LrSchedule, WarmupRampsLinearlyToTheBaseRate) {
  Result<LrSchedule> schedule = LrSchedule::Create(Options("constant", 3), 1.0, 10);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  // start_factor 1/4: (s+1)/4 for s < 3, then the base rate.
  for (double expected : {0.25, 0.5, 0.75, 1.0, 1.0, 1.0}) {
    EXPECT_EQ(schedule->learning_rate(), expected) << "step " << schedule->step();
    schedule->Advance();
  }
}

TEST(LrSchedule, StepDecaysEveryStepSize) {
  LrScheduleOptions options = Options("step", 0);
  options.step_size = 2;
  options.gamma = 0.5;
  Result<LrSchedule> schedule = LrSchedule::Create(options, 1.0, 10);
  ASSERT_TRUE(schedule.ok()) << schedule.status().message();
  for (double expected : {1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125}) {
    EXPECT_EQ(schedule->learning_rate(), expected) << "step " << schedule->step();
    schedule->Advance();
  }
}

TEST(LrSchedule, LinearAndCosineEndAtZero) {
  for (const char* name : {"linear", "cosine"}) {
    Result<LrSchedule> schedule = LrSchedule::Create(Options(name, 2), 1.0, 6);
    ASSERT_TRUE(schedule.ok()) << schedule.status().message();
    ASSERT_TRUE(schedule->Restore(2).ok());
    EXPECT_EQ(schedule->learning_rate(), 1.0) << name;
    schedule->Advance();
    EXPECT_LT(schedule->learning_rate(), 1.0) << name;
    EXPECT_GT(schedule->learning_rate(), 0.5) << name;
    ASSERT_TRUE(schedule->Restore(6).ok());
    EXPECT_NEAR(schedule->learning_rate(), 0.0, 1e-16) << name;
  }
}

TEST(LrSchedule, RestoreReplaysExactly) {
  Result<LrSchedule> running = LrSchedule::Create(Options("cosine", 5), 0.3, 1000);
  Result<LrSchedule> resumed = LrSchedule::Create(Options("cosine", 5), 0.3, 1000);
  ASSERT_TRUE(running.ok() && resumed.ok());
  for (int i = 0; i < 777; ++i) running->Advance();
  ASSERT_TRUE(resumed->Restore(777).ok());
  EXPECT_EQ(resumed->step(), 777);
  EXPECT_EQ(Bits(resumed->learning_rate()), Bits(running->learning_rate()));
  ASSERT_TRUE(resumed->Restore(0).ok());
  EXPECT_EQ(resumed->learning_rate(), 0.3 * (1.0 / 6.0));
}

TEST(LrSchedule, RestoreOutsideTheRunIsRefused) {
  Result<LrSchedule> schedule = LrSchedule::Create(Options("cosine", 0), 0.1, 60);
  ASSERT_TRUE(schedule.ok());
  for (int64_t step : {int64_t(-1), int64_t(61)}) {
    Status status = schedule->Restore(step);
    EXPECT_EQ(status.code(), DPL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status.message(), "cannot resume the learning-rate schedule at optimizer step " +
                                    std::to_string(step) + ": the run has 60 optimizer steps");
  }
}

TEST(LrSchedule, BadOptionsAreRefusedNamingTheFlag) {
  struct BadCase {
    LrScheduleOptions options;
    int64_t total_steps;
    std::string message;
  };
  LrScheduleOptions no_step_size = Options("step", 0);
  no_step_size.step_size = 0;
  LrScheduleOptions zero_gamma = Options("step", 0);
  zero_gamma.gamma = 0.0;
  const std::vector<BadCase> cases = {
      {Options("cosine", -1), 60, "--warmup-steps must be at least 0 (got -1)"},
      {no_step_size, 60,
       "--lr-schedule step needs --lr-step-size, the optimizer steps between decays, of at least "
       "1 (got 0)"},
      {zero_gamma, 60, "--lr-gamma must be a finite number greater than 0 (got 0)"},
      {Options("cosine", 60), 60,
       "--lr-schedule cosine with --warmup-steps 60 needs more optimizer steps than the run's "
       "60; use fewer warmup steps, or more epochs or data"},
      {Options("linear", 0), 0,
       "--lr-schedule linear with --warmup-steps 0 needs more optimizer steps than the run's 0; "
       "use fewer warmup steps, or more epochs or data"},
      {Options("constant", 8), 5,
       "--lr-schedule constant with --warmup-steps 8 needs more optimizer steps than the run's "
       "5; use fewer warmup steps, or more epochs or data"},
  };
  for (const BadCase& c : cases) {
    Result<LrSchedule> schedule = LrSchedule::Create(c.options, 0.1, c.total_steps);
    ASSERT_FALSE(schedule.ok()) << c.message;
    EXPECT_EQ(schedule.status().code(), DPL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(schedule.status().message(), c.message);
  }
  // Without warmup, a constant or step schedule needs no steps at all.
  EXPECT_TRUE(LrSchedule::Create(Options("constant", 0), 0.1, 0).ok());
  EXPECT_TRUE(LrSchedule::Create(Options("step", 0), 0.1, 0).ok());
}

}  // namespace
}  // namespace dpl::training
