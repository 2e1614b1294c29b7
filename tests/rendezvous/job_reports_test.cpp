// The workers' reports through a real store over loopback: stall posts, chunked values and the
// clock alignment (Note [Aligning clocks through the store]), with ranks as threads.
#include "rendezvous/job_reports.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "loopback_store.hpp"
#include "rendezvous/join.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;

using JobReportsTest = testing::LoopbackStoreTest;

TEST_F(JobReportsTest, TheStallBoardHoldsEachRanksLastPost) {
  auto client = Connect();
  const std::string prefix = AttemptPrefix(0);
  EXPECT_EQ(*StallBoardVersion(*client, prefix), 0);
  EXPECT_EQ(*ReadStallBoard(*client, prefix, 3), (std::vector<std::string>{"", "", ""}));
  ASSERT_TRUE(PostStall(*client, prefix, 2, "since=1 step=4 what=allreduce").ok());
  ASSERT_TRUE(PostStall(*client, prefix, 0, "since=2 step=4 what=allreduce").ok());
  ASSERT_TRUE(PostStall(*client, prefix, 0, "").ok());  // withdrawn
  EXPECT_EQ(*StallBoardVersion(*client, prefix), 3);
  EXPECT_EQ(*ReadStallBoard(*client, prefix, 3),
            (std::vector<std::string>{"", "", "since=1 step=4 what=allreduce"}));
  // Another attempt's board is its own.
  EXPECT_EQ(*StallBoardVersion(*client, AttemptPrefix(1)), 0);
}

TEST_F(JobReportsTest, ChunkedValuesComeBackWholeAndAreDeleted) {
  auto client = Connect();
  std::string large(100003, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = char(i * 131);
  for (const std::string& value :
       {std::string(), std::string("x"), std::string(1000, 'y'), large}) {
    ASSERT_TRUE(PutChunked(*client, "blob", value, 1000).ok());
    auto back = TakeChunked(*client, "blob", 1s);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, value) << "a value of " << value.size() << " bytes";
    EXPECT_TRUE(client->Get("blob/chunks", 0ms).status().IsTimeout());
    EXPECT_TRUE(client->Get("blob/0", 0ms).status().IsTimeout());
  }
}

TEST_F(JobReportsTest, TakingAMissingValueTimesOutNamingItsKey) {
  auto client = Connect();
  auto missing = TakeChunked(*client, "attempt/0/trace/rank/3", 50ms);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsTimeout());
  EXPECT_NE(missing.status().message().find("attempt/0/trace/rank/3/chunks"), std::string::npos)
      << missing.status().message();
}

// Two "machines" of two ranks each, all in this process: they share one steady clock, so the
// measured offset of machine 1 is the barrier's release delivered to two clients, near zero.
TEST_F(JobReportsTest, ClockAlignmentGivesEveryRankOfAMachineOneOffset) {
  constexpr int kMachines = 2, kPerMachine = 2, kWorld = kMachines * kPerMachine;
  std::vector<Result<ClockAlignment>> results(kWorld, Status::Error("not run"));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      auto client = Connect();
      results[size_t(rank)] = AlignClocks(*client, AttemptPrefix(0), kWorld, rank / kPerMachine,
                                          rank % kPerMachine, 10s);
    });
  }
  for (auto& thread : ranks) thread.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(results[size_t(rank)].ok()) << results[size_t(rank)].status().message();
  }
  EXPECT_EQ(results[0]->offset_ns, 0);
  EXPECT_EQ(results[1]->offset_ns, 0);  // machine 0 is the reference
  EXPECT_EQ(results[2]->offset_ns, results[3]->offset_ns);
  EXPECT_LT(std::llabs(results[2]->offset_ns), 100'000'000) << "one clock, 100 ms apart?";
  for (int rank = 1; rank < kWorld; ++rank) {
    EXPECT_EQ(results[size_t(rank)]->origin_ns, results[0]->origin_ns);
  }
  EXPECT_GT(results[0]->origin_ns, 0);
}

TEST_F(JobReportsTest, ClockAlignmentFailsWhenARankNeverComes) {
  auto client = Connect();
  auto alone = AlignClocks(*client, AttemptPrefix(0), 2, 0, 0, 100ms);
  ASSERT_FALSE(alone.ok());
  EXPECT_TRUE(alone.status().IsTimeout());
  EXPECT_NE(alone.status().message().find("barrier 'clock-0': 1 of 2 ranks arrived"),
            std::string::npos)
      << alone.status().message();
}

}  // namespace
}  // namespace dpl::rendezvous
