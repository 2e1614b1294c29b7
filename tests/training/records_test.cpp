// What a run writes besides its steps, without a launcher: the checkpoint policy
// (training/checkpoint_policy.hpp) over a model of this process (fakes/fake_model.hpp), and the
// reporter's metrics file (training/reporter.hpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fakes/fake_model.hpp"
#include "training/checkpoint_policy.hpp"
#include "training/reporter.hpp"
#include "training/step_parts.hpp"

namespace dpl::training {
namespace {

namespace fs = std::filesystem;

// A folder of its own for each test, removed after it.
class Folder {
 public:
  Folder()
      : path_(fs::temp_directory_path() /
              ("dpl-records-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~Folder() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// One rank's model and the parts of its step, alone.
struct RankParts {
  std::unique_ptr<Model> model;
  std::unique_ptr<Collectives> collectives;
  StepParts parts;
};

RankParts StartRun(const fakes::FakeModel& fake, const TrainingConfig& config) {
  RankParts run;
  run.model = fakes::CreateFakeModel(fake.plugin);
  run.collectives = std::move(*OpenCollectives(Membership{}));
  Result<StepParts> parts = PlaceParameters(*run.model, *run.collectives, PlacementSettings{});
  EXPECT_TRUE(parts.ok()) << parts.status().message();
  run.parts = std::move(*parts);
  EXPECT_TRUE(AddOptimizer(config, StepPlan(config, 10), *run.model, 0, 1, &run.parts).ok());
  return run;
}

void Steps(RankParts& run, int steps) {
  StepProfile profile;
  for (int step = 0; step < steps; ++step) {
    float value = 1.0f + float(step), loss = 0.0f;
    int64_t shape[1] = {1};
    const DLTensor batch = HostTensor(&value, DLDataType{kDLFloat, 32, 1}, 1, shape);
    const Status forward = run.model->TrainStep(batch, batch, &loss);
    Result<float> factor = run.parts.reducer->Finish(forward, 1.0f, &profile);
    ASSERT_TRUE(factor.ok());
    ASSERT_TRUE(run.parts.optimizer->Step(step, *factor).ok());
    ASSERT_TRUE(run.parts.reducer->ResetGradients(&profile).ok());
  }
}

std::vector<float> Values(const RankParts& run) {
  std::vector<float> values;
  for (const HostParameter& p : run.parts.placement->parameters()) {
    values.insert(values.end(), p.value, p.value + p.elements);
  }
  return values;
}

TrainingConfig AdamInto(const Folder& folder) {
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kAdam;
  config.optimizer.learning_rate = 0.05;
  config.checkpoint_dir = folder.str();
  config.resume_settings = {{"--lr", "0.05", "0.5"}};
  return config;
}

// A checkpoint restores the values, the optimizer's state and its steps, and the position.
TEST(CheckpointPolicy, ResumeRestoresWhatSaveWrote) {
  Folder folder;
  const fakes::FakeModel fake = fakes::FakeModelPlugin(fakes::FakeModelOptions{{6, 3}, false});
  TrainingConfig config = AdamInto(folder);
  RankParts first = StartRun(fake, config);
  Steps(first, 2);
  ValidationState validation;
  CheckpointPolicy writer(config, 0, 1, validation);
  ASSERT_TRUE(
      writer.Save({0, 2, 2}, *first.model, *first.parts.placement, *first.parts.optimizer).ok());
  ASSERT_TRUE(writer.Finish().ok());  // written on the writer's thread
  EXPECT_TRUE(fs::exists(folder / CheckpointFileName(2)));

  config.resume = true;
  RankParts resumed = StartRun(fake, config);
  EXPECT_NE(Values(resumed), Values(first));
  Result<TrainingPosition> position =
      CheckpointPolicy(config, 0, 1, validation)
          .Resume(*resumed.model, *resumed.parts.placement, *resumed.parts.optimizer);
  ASSERT_TRUE(position.ok()) << position.status().message();
  EXPECT_EQ(*position, (TrainingPosition{0, 2, 2}));
  EXPECT_EQ(Values(resumed), Values(first));
  EXPECT_EQ(resumed.parts.optimizer->optimizer_steps(), 2);
  // The same third step from either: the optimizer's state came back too.
  Steps(first, 1);
  Steps(resumed, 1);
  EXPECT_EQ(Values(resumed), Values(first));
}

TEST(CheckpointPolicy, AResumeWithOtherOptionsIsRefusedNamingBoth) {
  Folder folder;
  const fakes::FakeModel fake = fakes::FakeModelPlugin(fakes::FakeModelOptions{{4}, false});
  TrainingConfig config = AdamInto(folder);
  RankParts first = StartRun(fake, config);
  ValidationState validation;
  CheckpointPolicy writer(config, 0, 1, validation);
  ASSERT_TRUE(
      writer.Save({1, 0, 5}, *first.model, *first.parts.placement, *first.parts.optimizer).ok());
  ASSERT_TRUE(writer.Finish().ok());
  config.resume = true;
  config.resume_settings = {{"--lr", "0.1", "0.5"}};
  RankParts resumed = StartRun(fake, config);
  Result<TrainingPosition> position =
      CheckpointPolicy(config, 0, 1, validation)
          .Resume(*resumed.model, *resumed.parts.placement, *resumed.parts.optimizer);
  ASSERT_FALSE(position.ok());
  EXPECT_EQ(position.status().message(),
            "checkpoint " + (folder / CheckpointFileName(5)) +
                " was written with --lr 0.05 but this run has --lr 0.1; resume with the same "
                "options or use another --checkpoint-dir");
}

TEST(CheckpointPolicy, OnlyRankZeroWritesAndOnlyWhenDue) {
  Folder folder;
  const fakes::FakeModel fake = fakes::FakeModelPlugin(fakes::FakeModelOptions{{4}, false});
  TrainingConfig config = AdamInto(folder);
  config.checkpoint_every = 3;
  RankParts run = StartRun(fake, config);
  ValidationState validation;
  CheckpointPolicy other_rank(config, 1, 2, validation);
  EXPECT_FALSE(other_rank.DueAfter(2));
  EXPECT_TRUE(other_rank.DueAfter(6));
  ASSERT_TRUE(
      other_rank.Save({0, 3, 3}, *run.model, *run.parts.placement, *run.parts.optimizer).ok());
  ASSERT_TRUE(other_rank.Finish().ok());
  EXPECT_TRUE(fs::is_empty(folder.str()));
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Rank 0's reporter writing `config`'s metrics into `folder`, logging every `log_interval`
// batches, started on an epoch of 4 batches; null (and a failed expectation) when it cannot be.
std::unique_ptr<Reporter> StartedReporter(TrainingConfig& config, const Folder& folder,
                                          int log_interval) {
  config.metrics_file = folder / "metrics.jsonl";
  config.log_interval = log_interval;
  config.progress = false;
  Result<std::unique_ptr<Reporter>> reporter = Reporter::Create(config, 0);
  EXPECT_TRUE(reporter.ok()) << reporter.status().message();
  if (!reporter.ok()) return nullptr;
  (*reporter)->OnRunStart(StepPlan(config, 4));
  (*reporter)->StartEpoch();
  return std::move(*reporter);
}

// Rank 0's metrics file holds a line per logged batch, one per epoch and one per evaluation.
TEST(Reporter, RankZerosMetricsHoldTheStepsTheEpochAndTheEvaluation) {
  Folder folder;
  TrainingConfig config;
  {
    std::unique_ptr<Reporter> reporter = StartedReporter(config, folder, 2);
    ASSERT_NE(reporter, nullptr);
    StepProfile profile;
    for (int64_t batch = 1; batch <= 4; ++batch) {
      reporter->StartBatch(batch);
      reporter->OnBatch({0, batch, 4, batch, 0.5f * float(batch), batch * 8, 0.1}, profile);
    }
    const std::vector<double> totals = reporter->EpochLossTotals();
    EXPECT_EQ(totals, (std::vector<double>{5.0, 4.0}));
    reporter->OnEpochEnd(0, 32, {9.0, 8.0});  // two ranks' sums
    reporter->OnEvaluation({false, false, 6.0, 12.0, 9.0, 0.0, -1});
  }
  const std::vector<std::string> lines = Lines(config.metrics_file);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find(R"("kind": "step")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"("batch": 2)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"("batch": 4)"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(R"("kind": "epoch")"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find(R"("loss": 1.125)"), std::string::npos) << lines[2];
  EXPECT_NE(lines[3].find(R"("kind": "eval")"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find(R"("accuracy": 0.75)"), std::string::npos) << lines[3];
}

// With --grad-accum a line is an optimizer step's: one per step (not per micro-batch), with the
// mean loss of its micro-batches and the learning rate of that step.
TEST(Reporter, WithGradientAccumulationALineIsAStepsWithItsMeanLoss) {
  Folder folder;
  TrainingConfig config;
  config.grad_accum = 2;
  {
    std::unique_ptr<Reporter> reporter = StartedReporter(config, folder, 1);
    ASSERT_NE(reporter, nullptr);
    StepProfile profile;
    for (int64_t batch = 1; batch <= 4; ++batch) {
      const int64_t steps_done = batch / 2;  // a step ends at every second micro-batch
      const double learning_rate = (batch + 1) / 2 == 1 ? 0.1 : 0.05;
      reporter->StartBatch(steps_done);
      reporter->OnBatch({0, batch, 4, steps_done, float(batch), batch * 8, learning_rate}, profile);
    }
  }
  const std::vector<std::string> lines = Lines(config.metrics_file);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(R"("step": 1, "batch": 2, "loss": 1.5, "lr": 0.1,)"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(R"("step": 2, "batch": 4, "loss": 3.5, "lr": 0.05,)"), std::string::npos)
      << lines[1];
}

TEST(Reporter, OtherRanksWriteNothing) {
  Folder folder;
  TrainingConfig config;
  config.metrics_file = folder / "metrics.jsonl";
  config.progress = false;
  Result<std::unique_ptr<Reporter>> reporter = Reporter::Create(config, 1);
  ASSERT_TRUE(reporter.ok());
  (*reporter)->OnEpochEnd(0, 32, {1.0, 2.0});
  EXPECT_FALSE(fs::exists(config.metrics_file));
}

}  // namespace
}  // namespace dpl::training
