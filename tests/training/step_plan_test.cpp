#include "training/step_plan.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "training/sampler.hpp"

namespace dpl::training {

void PrintTo(const TrainingPosition& p, std::ostream* out) {
  *out << "{epoch " << p.epoch << ", batch " << p.step_in_epoch << ", step " << p.global_step
       << "}";
}

namespace {

TrainingConfig Config(int epochs, int grad_accum, int64_t max_steps) {
  TrainingConfig config;
  config.epochs = epochs;
  config.grad_accum = grad_accum;
  config.max_steps = max_steps;
  return config;
}

// (epoch, batch) pairs.
using Batches = std::vector<std::pair<int64_t, int64_t>>;

// What a run does: the batches it trains, those that end an optimizer step with the number of
// micro-batches they close, the steps done in all and where it ends.
struct Walk {
  Batches trained;
  Batches steps;
  std::vector<int64_t> micro_batches;
  int64_t total = 0;
  TrainingPosition end;
};

// The run as the plan lays it out.
Walk Follow(const StepPlan& plan) {
  Walk walk;
  for (int64_t epoch = plan.start().epoch; epoch < plan.EndEpoch(); ++epoch) {
    for (int64_t batch = plan.FirstBatch(epoch); batch < plan.EndBatch(epoch); ++batch) {
      walk.trained.push_back({epoch, batch});
      if (!plan.IsOptimizerStep(epoch, batch)) continue;
      walk.steps.push_back({epoch, batch});
      walk.micro_batches.push_back(plan.MicroBatchesSoFar(epoch, batch));
    }
  }
  walk.total = plan.TotalSteps();
  walk.end = plan.EndPosition();
  return walk;
}

// The same run stepped batch by batch, as a training loop written out by hand does it: a counter
// of micro-batches, a step at a full group or at the epoch's last batch, a stop at --max-steps.
Walk Simulate(int64_t epochs, int64_t batches, int64_t accum, int64_t max_steps,
              TrainingPosition start) {
  Walk walk;
  TrainingPosition position = start;
  auto limit_reached = [&] { return max_steps > 0 && position.global_step >= max_steps; };
  bool stopped = limit_reached();
  int64_t epoch = start.epoch;
  for (; epoch < epochs && !stopped; ++epoch) {
    int64_t micro = 0;
    for (int64_t batch = epoch == start.epoch ? start.step_in_epoch : 0;
         batch < batches && !stopped; ++batch) {
      walk.trained.push_back({epoch, batch});
      position.step_in_epoch = batch + 1;
      if (++micro < accum && batch + 1 < batches) continue;
      walk.steps.push_back({epoch, batch});
      walk.micro_batches.push_back(micro);
      micro = 0;
      ++position.global_step;
      stopped = limit_reached();
    }
  }
  walk.total = position.global_step;
  if (stopped && epoch == start.epoch) {
    walk.end = start;
  } else if (stopped && position.step_in_epoch < batches) {
    walk.end = {epoch - 1, position.step_in_epoch, position.global_step};
  } else {
    walk.end = {epoch, 0, position.global_step};
  }
  return walk;
}

// A position at the end of an epoch, as the next epoch's start: both resume the same way.
TrainingPosition Normalised(TrainingPosition position, int64_t batches) {
  if (batches > 0 && position.step_in_epoch == batches)
    return {position.epoch + 1, 0, position.global_step};
  return position;
}

void ExpectSameWalk(const Walk& plan, const Walk& simulated, const std::string& what) {
  EXPECT_EQ(plan.trained, simulated.trained) << what;
  EXPECT_EQ(plan.steps, simulated.steps) << what;
  EXPECT_EQ(plan.micro_batches, simulated.micro_batches) << what;
  EXPECT_EQ(plan.total, simulated.total) << what;
  EXPECT_EQ(plan.end, simulated.end) << what;
}

TEST(StepPlanTest, GradAccumWithAPartialLastGroup) {
  // 10 batches in groups of 4: steps after batches 3, 7 and 9, the last of 2 micro-batches.
  const StepPlan plan(Config(2, 4, 0), 10);
  EXPECT_EQ(plan.StepsPerEpoch(), 3);
  EXPECT_EQ(plan.EpochSteps(), 6);
  EXPECT_EQ(plan.TotalSteps(), 6);
  const Walk walk = Follow(plan);
  EXPECT_EQ(walk.steps, (Batches{{0, 3}, {0, 7}, {0, 9}, {1, 3}, {1, 7}, {1, 9}}));
  EXPECT_EQ(walk.micro_batches, (std::vector<int64_t>{4, 4, 2, 4, 4, 2}));
  EXPECT_EQ(walk.trained.size(), 20u);
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{2, 0, 6}));
}

TEST(StepPlanTest, MaxStepsEndsTheRunMidEpoch) {
  // 10 batches an epoch, 3 epochs; step 14 is batch 4 of epoch 1.
  const StepPlan plan(Config(3, 1, 14), 10);
  EXPECT_EQ(plan.EpochSteps(), 30) << "--max-steps is not counted";
  EXPECT_EQ(plan.TotalSteps(), 14);
  EXPECT_EQ(plan.EndEpoch(), 2);
  EXPECT_EQ(plan.EndBatch(0), 10);
  EXPECT_EQ(plan.EndBatch(1), 4);
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{1, 4, 14}));

  // With groups of 4 (3 steps an epoch), step 4 ends with the first group of epoch 1.
  const StepPlan grouped(Config(3, 4, 4), 10);
  EXPECT_EQ(grouped.EndEpoch(), 2);
  EXPECT_EQ(grouped.EndBatch(1), 4);
  EXPECT_EQ(grouped.EndPosition(), (TrainingPosition{1, 4, 4}));
}

TEST(StepPlanTest, MaxStepsAtTheEndOfAnEpochContinuesInTheNext) {
  const StepPlan plan(Config(3, 1, 10), 10);
  EXPECT_EQ(plan.EndEpoch(), 1);
  EXPECT_EQ(plan.EndBatch(0), 10);
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{1, 0, 10}));
}

TEST(StepPlanTest, MaxStepsBeyondTheEpochsChangesNothing) {
  const StepPlan plan(Config(2, 3, 100), 7);
  EXPECT_EQ(plan.TotalSteps(), 6);
  EXPECT_EQ(plan.EndEpoch(), 2);
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{2, 0, 6}));
}

// The schedule's length (Note [The schedule spans the run]): --max-steps when it ends the run
// before the epochs do, the same whether the run is fresh or resumed.
TEST(StepPlanTest, RunStepsAreTheStepsToTheRunsEnd) {
  EXPECT_EQ(StepPlan(Config(3, 1, 14), 10).RunSteps(), 14);
  EXPECT_EQ(StepPlan(Config(3, 1, 14), 10, {1, 4, 14}).RunSteps(), 14);
  EXPECT_EQ(StepPlan(Config(3, 1, 14), 10, {0, 5, 5}).RunSteps(), 14);
  EXPECT_EQ(StepPlan(Config(3, 1, 0), 10).RunSteps(), 30);
  EXPECT_EQ(StepPlan(Config(3, 1, 100), 10).RunSteps(), 30) << "the epochs end the run first";
  EXPECT_EQ(StepPlan(Config(2, 4, 5), 10).RunSteps(), 5);
  EXPECT_EQ(StepPlan(Config(2, 4, 7), 10, {1, 0, 3}).RunSteps(), 6);
}

TEST(StepPlanTest, ResumedMidEpoch) {
  // Resumed at batch 4 of epoch 1 after 14 steps, to step 25: batches 4..9 of epoch 1, then 0..4.
  const StepPlan plan(Config(3, 1, 25), 10, {1, 4, 14});
  EXPECT_EQ(plan.FirstBatch(1), 4);
  EXPECT_EQ(plan.FirstBatch(2), 0);
  EXPECT_EQ(plan.EndBatch(1), 10);
  EXPECT_EQ(plan.EndBatch(2), 5);
  EXPECT_EQ(plan.TotalSteps(), 25);
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{2, 5, 25}));
  EXPECT_EQ(plan.EpochSteps(), 30) << "the start does not change the epochs' steps";

  // Groups of 4 count from the resumed batch: steps after batches 7 and 9 (a group of 2).
  const StepPlan grouped(Config(2, 4, 0), 10, {1, 4, 4});
  const Walk walk = Follow(grouped);
  EXPECT_EQ(walk.steps, (Batches{{1, 7}, {1, 9}}));
  EXPECT_EQ(walk.micro_batches, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(grouped.TotalSteps(), 6);
}

TEST(StepPlanTest, ResumedAtTheLastStepTrainsNothingAndKeepsItsPosition) {
  const StepPlan at_limit(Config(3, 1, 14), 10, {1, 4, 14});
  EXPECT_EQ(at_limit.EndEpoch(), 1);
  EXPECT_EQ(at_limit.TotalSteps(), 14);
  EXPECT_TRUE(Follow(at_limit).trained.empty());
  EXPECT_EQ(at_limit.EndPosition(), (TrainingPosition{1, 4, 14}));

  const StepPlan past_limit(Config(3, 1, 12), 10, {1, 4, 14});
  EXPECT_EQ(past_limit.TotalSteps(), 14);
  EXPECT_EQ(past_limit.EndPosition(), (TrainingPosition{1, 4, 14}));

  // A run resumed after its last epoch.
  const StepPlan finished(Config(3, 1, 0), 10, {3, 0, 30});
  EXPECT_EQ(finished.EndEpoch(), 3);
  EXPECT_EQ(finished.TotalSteps(), 30);
  EXPECT_EQ(finished.EndPosition(), (TrainingPosition{3, 0, 30}));
}

// --drop-last shortens a rank's epoch (the sampler drops the tail instead of padding), so the plan
// of 13 samples on 4 ranks, one sample a batch, in groups of 3, has 4 batches (a partial group of
// one) or 3 (one full group).
TEST(StepPlanTest, DropLastChangesTheBatchesAndSteps) {
  for (const RemainderMode mode : {RemainderMode::kPad, RemainderMode::kDrop}) {
    const DistributedSampler sampler(13, 4, 1, 7, ShuffleMode::kShuffle, mode);
    const int64_t batches = StepPlan::BatchesPerEpoch(sampler.samples_per_rank(), 1);
    const StepPlan plan(Config(2, 3, 0), batches);
    const bool pad = mode == RemainderMode::kPad;
    EXPECT_EQ(plan.batches_per_epoch(), pad ? 4 : 3);
    EXPECT_EQ(plan.TotalSteps(), pad ? 4 : 2);
    EXPECT_TRUE(plan.IsOptimizerStep(0, 2));
    if (pad) {
      EXPECT_TRUE(plan.IsOptimizerStep(0, 3));
      EXPECT_EQ(plan.MicroBatchesSoFar(0, 3), 1);
    }
  }
  EXPECT_EQ(StepPlan::BatchesPerEpoch(10, 4), 3) << "the last batch may be short";
  EXPECT_EQ(StepPlan::BatchesPerEpoch(0, 4), 0);
}

TEST(StepPlanTest, AnEmptyEpochMakesNoSteps) {
  const StepPlan plan(Config(3, 2, 5), 0);
  EXPECT_EQ(plan.TotalSteps(), 0);
  EXPECT_EQ(plan.EndEpoch(), 3);
  EXPECT_TRUE(Follow(plan).trained.empty());
  EXPECT_EQ(plan.EndPosition(), (TrainingPosition{3, 0, 0}));
}

// Every small shape, fresh and resumed at every checkpoint the straight run writes: the plan lays
// out what the loop stepped by hand does, and a resumed run continues the straight one exactly.
TEST(StepPlanTest, MatchesTheHandSteppedLoopAndResumesAnywhere) {
  for (int epochs = 0; epochs <= 3; ++epochs) {
    for (int64_t batches = 0; batches <= 7; ++batches) {
      for (int accum = 1; accum <= 4; ++accum) {
        for (int64_t max_steps = 0; max_steps <= epochs * batches + 2; ++max_steps) {
          const TrainingConfig config = Config(epochs, accum, max_steps);
          const std::string shape = std::to_string(epochs) + " epochs of " +
                                    std::to_string(batches) + " batches, grad-accum " +
                                    std::to_string(accum) + ", max-steps " +
                                    std::to_string(max_steps);
          const Walk straight = Follow(StepPlan(config, batches));
          ExpectSameWalk(straight, Simulate(epochs, batches, accum, max_steps, {}), shape);
          EXPECT_EQ(StepPlan(config, batches).RunSteps(), straight.total) << shape;
          for (size_t k = 0; k < straight.steps.size(); ++k) {
            const auto [epoch, batch] = straight.steps[k];
            const TrainingPosition checkpoint{epoch, batch + 1, int64_t(k) + 1};
            const Walk resumed = Follow(StepPlan(config, batches, checkpoint));
            const std::string what = shape + ", resumed after step " + std::to_string(k + 1);
            ExpectSameWalk(resumed, Simulate(epochs, batches, accum, max_steps, checkpoint), what);
            EXPECT_EQ(resumed.steps, Batches(straight.steps.begin() + k + 1, straight.steps.end()))
                << what;
            EXPECT_EQ(resumed.total, straight.total) << what;
            EXPECT_EQ(StepPlan(config, batches, checkpoint).RunSteps(), straight.total) << what;
            // A run resumed at its last step keeps the checkpoint's position.
            EXPECT_EQ(Normalised(resumed.end, batches), Normalised(straight.end, batches)) << what;
          }
          ExpectSameWalk(Follow(StepPlan(config, batches, straight.end)),
                         Simulate(epochs, batches, accum, max_steps, straight.end),
                         shape + ", resumed at its end");
        }
      }
    }
  }
}

}  // namespace
}  // namespace dpl::training
