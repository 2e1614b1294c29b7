// The progress bar the launcher draws from rank 0's progress records (the records themselves:
// tests/protocol/progress_record_test.cpp).
#include "observability/progress.hpp"

#include <gtest/gtest.h>

#include "protocol/progress_sample.hpp"

namespace dpl::observability {
namespace {

using protocol::ProgressRecord;

ProgressRecord Sample() {
  return protocol::SampleProgress();
}

TEST(ProgressBars, ShowStepsRateEtaAndLoss) {
  // 12 steps in 6 s: 18 left take 9 s.
  EXPECT_EQ(RenderProgressBar(Sample(), 79),
            "[=========>              ] 12/30 steps  40% 1432 samples/s ETA 0:09 loss 0.7641");
  EXPECT_EQ(RenderProgressBar(Sample(), 79).size(), 79u);
}

TEST(ProgressBars, ShrinkTheBarThenDropFieldsOnNarrowTerminals) {
  EXPECT_EQ(RenderProgressBar(Sample(), 70),
            "[======>        ] 12/30 steps  40% 1432 samples/s ETA 0:09 loss 0.7641");
  EXPECT_EQ(RenderProgressBar(Sample(), 50), "[======>         ] 12/30 steps  40% 1432 samples/s");
  EXPECT_EQ(RenderProgressBar(Sample(), 20), "12/30 steps  40%");
}

TEST(ProgressBars, CountTheEpochsOfALongerRunAndTheTimeAtTheEnd) {
  ProgressRecord r = Sample();
  r.epoch = 1;
  r.epochs = 3;
  EXPECT_EQ(RenderProgressBar(r, 100),
            "[============>                 ] 12/30 steps  40% 1432 samples/s ETA 0:09 loss 0.7641 "
            "epoch 2/3");
  r.step = r.total = 30;
  r.seconds = 3725;
  r.done = true;
  EXPECT_EQ(
      RenderProgressBar(r, 100),
      "[==============================] 30/30 steps 100% 1432 samples/s in 1:02:05 loss 0.7641 "
      "epoch 2/3");
}

// The ETA counts the steps of this run only: a resumed run's earlier steps took no time here.
TEST(ProgressBars, EtaOfAResumedRunAndBeforeTheFirstStep) {
  ProgressRecord r = Sample();
  r.start_step = 10;  // 2 steps in 6 s: 18 left take 54 s
  EXPECT_EQ(RenderProgressBar(r, 79),
            "[=========>              ] 12/30 steps  40% 1432 samples/s ETA 0:54 loss 0.7641");
  r.step = 10;
  r.samples_per_s = 0;
  EXPECT_EQ(RenderProgressBar(r, 79),
            "[==========>                   ] 10/30 steps  33% 0 samples/s ETA -");
}

TEST(ProgressBars, ATotalBelowTheStepIsTheStep) {
  ProgressRecord r = Sample();
  r.total = 5;
  EXPECT_EQ(RenderProgressBar(r, 50), "[================] 12/12 steps 100% 1432 samples/s");
}

}  // namespace
}  // namespace dpl::observability
