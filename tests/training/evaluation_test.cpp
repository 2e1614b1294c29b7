// Validation while training (training/evaluation.hpp): the best loss and the evaluations without
// improvement, --early-stop-patience's rule, and the checkpoint's "validation" that carries them
// across a resume.
#include "training/evaluation.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "training/checkpoint.hpp"

namespace dpl::training {
namespace {

TEST(ValidationState, KeepsTheBestLossAndCountsEvaluationsWithoutImprovement) {
  ValidationState state;
  EXPECT_TRUE(std::isinf(state.best_loss));
  const std::vector<double> losses = {3.0, 2.0, 2.5, 2.0, 1.5, 1.6, 1.7};
  const std::vector<bool> improved = {true, true, false, false, true, false, false};
  const std::vector<int64_t> without = {0, 0, 1, 2, 0, 1, 2};
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_EQ(RecordValidationLoss(losses[i], &state), improved[i]) << i;
    EXPECT_EQ(state.without_improvement, without[i]) << i;
  }
  EXPECT_EQ(state.best_loss, 1.5);
  EXPECT_EQ(state.evaluations, 7);
  EXPECT_TRUE(PatienceRunOut(state, 2));  // 1.6 and 1.7 did not beat 1.5
  EXPECT_FALSE(PatienceRunOut(state, 3));
  EXPECT_FALSE(PatienceRunOut(state, 0)) << "0: never";
  // An equal loss is no improvement (2.0 after 2.0 above); a NaN neither.
  EXPECT_FALSE(RecordValidationLoss(std::nan(""), &state));
  EXPECT_EQ(state.best_loss, 1.5);
}

TEST(ValidationState, TravelsInCheckpoints) {
  char pattern[] = "/tmp/dpl-validation-XXXXXX";
  const std::string dir = ::mkdtemp(pattern);
  CheckpointState state;
  state.global_step = 150;
  state.optimizer_name = "adamw";
  state.options = {{"--model", "gpt"}};
  ASSERT_TRUE(WriteCheckpoint(dir, state).ok());
  Result<CheckpointState> without = ReadCheckpoint(dir + "/" + CheckpointFileName(150));
  ASSERT_TRUE(without.ok()) << without.status().message();
  EXPECT_FALSE(without->validation.has_value()) << "a run that does not validate writes none";
  for (const double best : {1.8125, std::numeric_limits<double>::infinity()}) {
    state.validation = ValidationCheckpoint{best, 3, 1};
    ASSERT_TRUE(WriteCheckpoint(dir, state).ok());
    Result<CheckpointState> read = ReadCheckpoint(dir + "/" + CheckpointFileName(150));
    ASSERT_TRUE(read.ok()) << read.status().message();
    ASSERT_TRUE(read->validation.has_value());
    EXPECT_EQ(read->validation->best_loss, best);
    EXPECT_EQ(read->validation->evaluations, 3);
    EXPECT_EQ(read->validation->without_improvement, 1);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dpl::training
