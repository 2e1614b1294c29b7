// The flags of validation while training: --eval-every, --eval-batches, --early-stop-patience,
// --export-best: their values reach the training config and the workers, bad values and flags
// without --eval-every are refused with their exact message.
#include <gtest/gtest.h>

#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

TEST(ValidationFlags, ReachTheConfigAndTheWorkers) {
  auto options = Parse({"--eval-every", "50", "--eval-batches", "4", "--early-stop-patience", "3",
                        "--export-best", "best.pt"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  for (const Options* o : {&*options, &*worker}) {
    EXPECT_EQ(o->training.eval_every, 50);
    EXPECT_EQ(o->training.eval_batches, 4);
    EXPECT_EQ(o->training.early_stop_patience, 3);
    EXPECT_EQ(o->training.export_best_file, "best.pt");
  }
}

TEST(ValidationFlags, DefaultsAreNoValidationAndTwentyBatches) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->training.eval_every, 0);
  EXPECT_EQ(options->training.eval_batches, 20);
  EXPECT_EQ(options->training.early_stop_patience, 0);
  EXPECT_EQ(options->training.export_best_file, "");
}

TEST(ValidationFlags, BadValuesAndFlagsWithoutEvalEveryAreRefused) {
  EXPECT_EQ(ErrorOf({"--eval-every", "-1"}),
            "--eval-every must be between 0 and 9223372036854775807 (got -1)");
  EXPECT_EQ(ErrorOf({"--eval-batches", "x"}),
            "--eval-batches must be an integer between 0 and 9223372036854775807 (got 'x')");
  EXPECT_EQ(ErrorOf({"--early-stop-patience", "2"}),
            "--early-stop-patience counts evaluations of the validation split: give --eval-every "
            "N");
  EXPECT_EQ(ErrorOf({"--export-best", "best.pt"}),
            "--export-best keeps the model of the lowest validation loss: give --eval-every N");
}

}  // namespace
}  // namespace dpl::cli
