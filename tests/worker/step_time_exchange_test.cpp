// The text of a rank's post of its step times (worker/step_time_exchange.hpp), read back as
// written, and what is not a post refused.
#include "worker/step_time_exchange.hpp"

#include <gtest/gtest.h>

namespace dpl::worker {
namespace {

TEST(StepTimeExchange, APostReadsBackAsWritten) {
  training::RankStepTimes times{3, 1, "node-7", {{41, 0.0125}, {42, 1.5}}};
  const std::string text = StepTimeExchange::Encode(times);
  EXPECT_EQ(text, "1 node-7\n41 12500\n42 1500000\n");
  std::optional<training::RankStepTimes> read = StepTimeExchange::Decode(3, text);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->rank, 3);
  EXPECT_EQ(read->machine, 1);
  EXPECT_EQ(read->host, "node-7");
  EXPECT_EQ(read->seconds_of_step, times.seconds_of_step);
}

TEST(StepTimeExchange, WhatIsNoPostIsRefused) {
  EXPECT_FALSE(StepTimeExchange::Decode(0, "").has_value()) << "no post yet";
  EXPECT_FALSE(StepTimeExchange::Decode(0, "node\n").has_value()) << "no machine number";
  EXPECT_FALSE(StepTimeExchange::Decode(0, "1 node\n41 x\n").has_value());
  ASSERT_TRUE(StepTimeExchange::Decode(0, "1 node\n").has_value()) << "no step yet is a post";
}

}  // namespace
}  // namespace dpl::worker
