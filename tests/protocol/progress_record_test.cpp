// Rank 0's progress records: the line that carries one, and what is not one.
#include "protocol/progress_record.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "protocol/progress_sample.hpp"

namespace dpl::protocol {
namespace {

ProgressRecord Sample() {
  return protocol::SampleProgress();
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

}  // namespace
}  // namespace dpl::protocol
