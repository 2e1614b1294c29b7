#include "training/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

namespace dpl::training {
namespace {

struct Shape {
  int64_t size;
  int world;
};

class SamplerTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SamplerTest, PaddedShardsCoverEverythingAndAreEqualSized) {
  const auto [size, world] = GetParam();
  std::vector<int64_t> all;
  const int64_t per_rank = (size + world - 1) / world;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(size, world, r, 42, ShuffleMode::kShuffle, RemainderMode::kPad);
    std::vector<int64_t> mine = s.EpochIndices(3);
    EXPECT_EQ(int64_t(mine.size()), per_rank);
    EXPECT_EQ(s.samples_per_rank(), per_rank);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(int64_t(all.size()), per_rank * world);
  std::set<int64_t> distinct(all.begin(), all.end());
  EXPECT_EQ(int64_t(distinct.size()), size);  // every index covered
  if (!distinct.empty()) {
    EXPECT_EQ(*distinct.begin(), 0);
    EXPECT_EQ(*distinct.rbegin(), size - 1);
  }
  // Padding repeats the start of the permutation.
  const std::vector<int64_t> order = Permutation(size, 42 + 3);
  const int64_t padding = per_rank * world - size;
  for (int64_t k = 0; k < padding; ++k) {
    const int64_t position = size + k;
    DistributedSampler s(size, world, int(position % world), 42, ShuffleMode::kShuffle,
                         RemainderMode::kPad);
    EXPECT_EQ(s.EpochIndices(3)[position / world], order[k % size]);
  }
}

TEST_P(SamplerTest, DropLastGivesDisjointShards) {
  const auto [size, world] = GetParam();
  std::set<int64_t> seen;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(size, world, r, 7, ShuffleMode::kShuffle, RemainderMode::kDrop);
    std::vector<int64_t> mine = s.EpochIndices(0);
    EXPECT_EQ(int64_t(mine.size()), size / world);
    for (int64_t i : mine) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
  EXPECT_EQ(int64_t(seen.size()), size / world * world);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SamplerTest,
                         ::testing::Values(Shape{0, 1}, Shape{1, 1}, Shape{1, 3}, Shape{10, 2},
                                           Shape{11, 3}, Shape{101, 4}, Shape{60000, 8}));

TEST(Sampler, RankTakesEveryWorldSizeth) {
  const std::vector<int64_t> order = Permutation(12, 5);
  DistributedSampler s(12, 3, 1, 5, ShuffleMode::kShuffle, RemainderMode::kPad);
  EXPECT_EQ(s.EpochIndices(0), (std::vector<int64_t>{order[1], order[4], order[7], order[10]}));
  DistributedSampler sequential(7, 2, 0, 5, ShuffleMode::kSequential, RemainderMode::kPad);
  EXPECT_EQ(sequential.EpochIndices(9), (std::vector<int64_t>{0, 2, 4, 6}));
}

TEST(Sampler, ReshufflesPerEpochIdenticallyOnEveryRank) {
  DistributedSampler a(1000, 2, 0, 1, ShuffleMode::kShuffle, RemainderMode::kPad);
  DistributedSampler a_again(1000, 2, 0, 1, ShuffleMode::kShuffle, RemainderMode::kPad);
  EXPECT_EQ(a.EpochIndices(0), a_again.EpochIndices(0));  // same seed+epoch, same order
  EXPECT_NE(a.EpochIndices(0), a.EpochIndices(1));        // new epoch, new order
  // Both ranks derive from the same permutation: together they are that permutation.
  const std::vector<int64_t> order = Permutation(1000, 1 + 1);
  DistributedSampler b(1000, 2, 1, 1, ShuffleMode::kShuffle, RemainderMode::kPad);
  const std::vector<int64_t> r0 = a.EpochIndices(1), r1 = b.EpochIndices(1);
  for (size_t i = 0; i < 500; ++i) {
    EXPECT_EQ(r0[i], order[2 * i]);
    EXPECT_EQ(r1[i], order[2 * i + 1]);
  }
}

// Note [Global sample position]: batch b of all ranks together is positions [b * B, (b + 1) * B)
// of the epoch's order at every world size that divides the global batch B, so a run resumed at
// another world size after b batches continues at the same sample.
TEST(Sampler, ABatchOfAllRanksIsTheSameSpanOfTheOrderAtEveryWorldSize) {
  const int64_t size = 600, global_batch = 24;
  const std::vector<int64_t> order = Permutation(size, 9 + 2);
  for (const int world : {1, 2, 3, 4, 6, 8, 12, 24}) {
    SCOPED_TRACE(world);
    const int64_t local = global_batch / world;
    std::vector<std::vector<int64_t>> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(
          DistributedSampler(size, world, r, 9, ShuffleMode::kShuffle, RemainderMode::kPad)
              .EpochIndices(2));
    }
    for (int64_t batch = 0; batch * global_batch < size; ++batch) {
      std::multiset<int64_t> together;
      for (const std::vector<int64_t>& mine : ranks) {
        together.insert(mine.begin() + batch * local, mine.begin() + (batch + 1) * local);
      }
      const std::multiset<int64_t> span(order.begin() + batch * global_batch,
                                        order.begin() + (batch + 1) * global_batch);
      ASSERT_EQ(together, span) << "batch " << batch;
    }
  }
}

TEST(Sampler, PerRankBatchSize) {
  Result<int> ok = PerRankBatchSize(128, 4);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 32);
  Result<int> bad = PerRankBatchSize(100, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--batch-size 100 is the global batch and must be a positive multiple of the world "
            "size 3; pass e.g. --batch-size 99");
}

}  // namespace
}  // namespace dpl::training
