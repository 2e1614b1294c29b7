// Note [Stragglers] (training/stragglers.hpp): rank 0's comparison of every rank's compute time per
// step, fed as the times arrive; and the line the log gets.
#include "training/stragglers.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dpl::training {
namespace {

// Rank `rank`'s times of steps first..last, `seconds` each.
RankStepTimes Times(int rank, int64_t first, int64_t last, double seconds) {
  RankStepTimes times{rank, rank / 2, "node" + std::to_string(rank / 2), {}};
  for (int64_t step = first; step <= last; ++step)
    times.seconds_of_step.emplace_back(step, seconds);
  return times;
}

// Feeds every rank's times of steps first..last (rank `slow` `slow_seconds` a step, the others
// 0.010) and compares.
std::vector<StragglerEvent> Steps(StragglerWatch& watch, int world_size, int64_t first,
                                  int64_t last, int slow, double slow_seconds) {
  for (int rank = 0; rank < world_size; ++rank) {
    watch.Add(Times(rank, first, last, rank == slow ? slow_seconds : 0.010));
  }
  return watch.Compare();
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(StragglerWatch, NamesARankSlowForTheStepsInARowAndAgainOnceBack) {
  StragglerWatch watch(4, 2.0, 5);
  EXPECT_TRUE(Steps(watch, 4, 1, 19, -1, 0.0).empty());
  EXPECT_TRUE(Steps(watch, 4, 20, 23, 1, 0.100).empty()) << "four slow steps are not five";
  std::vector<StragglerEvent> named = Steps(watch, 4, 24, 30, 1, 0.100);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_EQ(named[0].machine, 0);
  EXPECT_EQ(named[0].host, "node0");
  EXPECT_TRUE(named[0].straggling);
  EXPECT_EQ(named[0].first_step, 20);
  EXPECT_EQ(named[0].last_step, 24);
  EXPECT_DOUBLE_EQ(named[0].seconds, 0.100);
  EXPECT_DOUBLE_EQ(named[0].median_seconds, 0.010);
  EXPECT_EQ(DescribeStraggler(named[0], 2.0),
            "rank 1 on machine 0 (host node0) is a straggler: 100.0 ms of compute a step against "
            "the median rank's 10.0 ms, 10.0x (--straggler-factor 2), over steps 20-24");
  std::vector<StragglerEvent> back = Steps(watch, 4, 31, 40, -1, 0.0);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_FALSE(back[0].straggling);
  EXPECT_EQ(back[0].first_step, 31);
  EXPECT_EQ(back[0].last_step, 35);
  EXPECT_TRUE(Contains(DescribeStraggler(back[0], 2.0), "is no longer a straggler"));
}

TEST(StragglerWatch, TwoRanksCompareWithTheFasterAndWithinTheFactorIsNoStraggler) {
  StragglerWatch two(2, 2.0, 3);
  std::vector<StragglerEvent> named = Steps(two, 2, 1, 3, 0, 0.025);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 0);
  StragglerWatch four(4, 2.0, 3);
  EXPECT_TRUE(Steps(four, 4, 1, 50, 3, 0.019).empty()) << "1.9x is within a factor of 2";
  // 3x, but by 2 ms a step (the others 1 ms): the noise of a shared machine, not a straggler.
  StragglerWatch short_steps(2, 2.0, 3);
  for (int rank = 0; rank < 2; ++rank)
    short_steps.Add(Times(rank, 1, 50, rank == 1 ? 0.003 : 0.001));
  EXPECT_TRUE(short_steps.Compare().empty());
}

TEST(StragglerWatch, ComparesAStepOnceEveryRanksTimeCameAndSkipsOnesThatNeverWill) {
  StragglerWatch watch(3, 2.0, 2);
  watch.Add(Times(0, 1, 4, 0.010));
  watch.Add(Times(2, 1, 4, 0.010));
  EXPECT_TRUE(watch.Compare().empty()) << "rank 1's times have not come";
  // Rank 1's steps 1 and 2 never come (its post moved past them); 3 and 4 are slow.
  watch.Add(Times(1, 3, 4, 0.050));
  std::vector<StragglerEvent> named = watch.Compare();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
  EXPECT_EQ(named[0].first_step, 3);
  // Times of steps already compared are ignored, as are ranks out of range.
  watch.Add(Times(1, 1, 4, 0.010));
  watch.Add(Times(7, 5, 9, 0.010));
  EXPECT_TRUE(watch.Compare().empty());
}

}  // namespace
}  // namespace dpl::training
