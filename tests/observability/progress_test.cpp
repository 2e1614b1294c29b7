// The progress records of rank 0 and the bar the launcher draws from them.
#include "observability/progress.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace dpl::observability {
namespace {

ProgressRecord Sample() {
  ProgressRecord r;
  r.step = 12;
  r.total = 30;
  r.start_step = 0;
  r.epoch = 0;
  r.epochs = 1;
  r.samples_per_s = 1432.4;
  r.seconds = 6.0;
  r.loss = 0.76407;
  return r;
}

TEST(ProgressRecords, RoundTripThroughTheirLine) {
  ProgressRecord r = Sample();
  r.epoch = 2;
  r.epochs = 5;
  r.start_step = 4;
  r.done = true;
  const std::string line = EncodeProgress(r);
  EXPECT_EQ(line,
            "\x1e"
            "dpl-progress step=12 total=30 start=4 epoch=2 epochs=5 rate=1432.400 "
            "seconds=6.000 loss=0.76407 done=1");
  EXPECT_TRUE(IsProgressRecord(line));
  const std::optional<ProgressRecord> back = DecodeProgress(line);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->step, 12);
  EXPECT_EQ(back->total, 30);
  EXPECT_EQ(back->start_step, 4);
  EXPECT_EQ(back->epoch, 2);
  EXPECT_EQ(back->epochs, 5);
  EXPECT_DOUBLE_EQ(back->samples_per_s, 1432.4);
  EXPECT_DOUBLE_EQ(back->seconds, 6.0);
  EXPECT_DOUBLE_EQ(back->loss, 0.76407);
  EXPECT_TRUE(back->done);
}

TEST(ProgressRecords, ANanLossSurvives) {
  ProgressRecord r = Sample();
  r.loss = std::nan("");
  const std::optional<ProgressRecord> back = DecodeProgress(EncodeProgress(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(std::isnan(back->loss));
}

TEST(ProgressRecords, LogLinesAndBrokenRecordsAreNotRecords) {
  EXPECT_FALSE(IsProgressRecord("[rank 0] epoch: 0 [10/30] training loss: 1.7"));
  EXPECT_FALSE(DecodeProgress("[rank 0] dpl-progress step=1").has_value());
  const std::string good = EncodeProgress(Sample());
  EXPECT_FALSE(DecodeProgress(good.substr(0, good.size() - 1)).has_value());  // truncated
  EXPECT_FALSE(DecodeProgress(good + " extra").has_value());
  EXPECT_TRUE(IsProgressRecord(good.substr(0, 14)));  // a record, if a broken one
  ProgressRecord backwards = Sample();
  backwards.start_step = 13;  // after the step: impossible
  EXPECT_FALSE(DecodeProgress(EncodeProgress(backwards)).has_value());
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
