// Note [Replica check]: the hash (XXH64, checked against the xxHash library's values), what one
// changed bit does to it, the failure's words, and the gather through the store that device
// backends use. The check in a real job: long_runs_test.cpp.
#include "training/replica_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "training/collectives/store_collectives.hpp"

namespace dpl::training {
namespace {

TEST(ReplicaCheck, Xxh64GivesTheXxhashLibrarysValues) {
  const std::string nobody = "Nobody inspects the spammish repetition";  // 39 bytes: a stripe
  EXPECT_EQ(Xxh64("", 0, 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(Xxh64("a", 1, 0), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(Xxh64("abc", 3, 0), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(Xxh64(nobody.data(), nobody.size(), 0), 0xfbcea83c8a378bf1ull);
  EXPECT_EQ(Xxh64(nobody.data(), nobody.size(), 20141025), 0xce06936136852706ull);
  // 32 stripes, then 8 + 4 + 1 bytes of tail.
  std::string bytes;
  for (int copy = 0; copy < 4; ++copy)
    for (int b = 0; b < 256; ++b) bytes += char(b);
  bytes += "xyz12";
  EXPECT_EQ(Xxh64(bytes.data(), bytes.size(), 7), 0x9352913df07e7753ull);
}

HostParameter Tensor(const std::string& name, std::vector<float>& values) {
  HostParameter p;
  p.name = name;
  p.elements = values.size();
  p.value = values.data();
  return p;
}

TEST(ReplicaCheck, EveryBitOfEveryTensorCounts) {
  std::vector<float> weight(1000), bias(10);
  std::iota(weight.begin(), weight.end(), 0.5f);
  std::iota(bias.begin(), bias.end(), -3.0f);
  const std::vector<HostParameter> parameters = {Tensor("fc.weight", weight),
                                                 Tensor("fc.bias", bias)};
  const std::vector<uint64_t> before = TensorHashes(parameters);
  const uint64_t combined = CombinedHash(before);
  bias[7] = std::nextafter(bias[7], std::numeric_limits<float>::infinity());
  const std::vector<uint64_t> after = TensorHashes(parameters);
  EXPECT_EQ(after[0], before[0]);
  EXPECT_NE(after[1], before[1]);
  EXPECT_NE(CombinedHash(after), combined);
  bias[7] = std::nextafter(bias[7], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(CombinedHash(TensorHashes(parameters)), combined);
  // +0 and -0 compare equal as floats, but a replica must match bit for bit.
  weight[0] = 0.0f;
  const uint64_t positive = CombinedHash(TensorHashes(parameters));
  weight[0] = -0.0f;
  EXPECT_NE(CombinedHash(TensorHashes(parameters)), positive);
  // The same tensors in another order are another model.
  EXPECT_NE(CombinedHash({before[1], before[0]}), combined);
}

TEST(ReplicaCheck, TheFailureSaysWhichRanksAgreeWhichDoNotAndWhen) {
  const std::string advice =
      ". Every rank applies the same update to the same averaged gradients, so the replicas must "
      "be bit-identical: look for a model plugin that changes its parameters outside the "
      "optimizer step or differently on some rank, a backend that gives the ranks different sums, "
      "or faulty memory. A restart would not cure it, so the job is not restarted";
  const Status two = ReplicaMismatch(30, 10, {5, 6}, {"", "fc.bias"}, 20);
  EXPECT_EQ(two.message(),
            "the replicas differ at step 30 (--check-replicas 10): rank 1 (fc.bias) differs from "
            "rank 0; no other rank agrees with rank 0; all agreed at step 20" +
                advice);
  EXPECT_TRUE(IsReplicaMismatch(two));
  EXPECT_TRUE(IsReplicaMismatch(two.WithContext("training")));
  const Status rank0_odd = ReplicaMismatch(7, 7, {1, 2, 2, 2}, {}, -1);
  EXPECT_EQ(rank0_odd.message(),
            "the replicas differ at step 7 (--check-replicas 7): ranks 1, 2 and 3 differ from "
            "rank 0 (and agree with each other); no other rank agrees with rank 0; no check had "
            "passed before in this run" +
                advice);
  std::vector<uint64_t> many(12, 9);
  many[3] = many[5] = 4;
  many[11] = 8;
  const Status mixed =
      ReplicaMismatch(100, 50, many, std::vector<std::string>(12, "a.weight, b and 3 more"), 50);
  EXPECT_EQ(mixed.message(),
            "the replicas differ at step 100 (--check-replicas 50): ranks 3 (a.weight, b and 3 "
            "more), 5 (a.weight, b and 3 more) and 11 (a.weight, b and 3 more) differ from rank 0; "
            "ranks 1, 2, 4, 6, 7, 8, 9 and 10 agree with rank 0; all agreed at step 50" +
                advice);
  EXPECT_FALSE(IsReplicaMismatch(Status::Error("the model failed")));
  EXPECT_FALSE(IsReplicaMismatch(Status::Ok()));
}

// The gather of a backend that moves device memory only: each rank's words, exact, through sums
// of doubles (here rank 1 of 3, the others' contributions added by the fake store).
TEST(ReplicaCheck, TheStoreGatherCarriesEveryBitOfEveryRank) {
  const std::vector<uint64_t> words = {0xffffffffffffffffull, 0x8000000000000001ull,
                                       0x0123456789abcdefull};
  std::vector<std::string> names;
  auto sum = [&](const std::string& name, std::vector<double>* values) {
    names.push_back(name);
    EXPECT_EQ(values->size(), 6u);
    for (size_t r : {0u, 2u}) {  // what ranks 0 and 2 put in their slots
      (*values)[2 * r] += double(words[r] >> 32);
      (*values)[2 * r + 1] += double(words[r] & 0xffffffffull);
    }
    return Status::Ok();
  };
  Result<std::vector<uint64_t>> all =
      GatherWordsThroughSums(sum, {words[1]}, "replica-check-10", 1, 3);
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(*all, words);
  EXPECT_EQ(names, std::vector<std::string>{"replica-check-10"});
}

TEST(ReplicaCheck, OneRankOrNoIntervalChecksNothing) {
  int calls = 0;
  GatherWords counting = [&](const std::vector<uint64_t>& mine, const std::string&) {
    ++calls;
    return Result<std::vector<uint64_t>>(mine);
  };
  std::vector<float> values(4, 1.0f);
  const std::vector<HostParameter> parameters = {Tensor("w", values)};
  EXPECT_TRUE(ReplicaCheck(10, 1, counting).AfterStep(10, parameters).ok());
  EXPECT_TRUE(ReplicaCheck(0, 4, counting).AfterStep(10, parameters).ok());
  ReplicaCheck check(10, 2, [&](const std::vector<uint64_t>& mine, const std::string&) {
    ++calls;
    std::vector<uint64_t> both = mine;
    both.insert(both.end(), mine.begin(), mine.end());
    return Result<std::vector<uint64_t>>(both);
  });
  EXPECT_TRUE(check.AfterStep(9, parameters).ok());
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(check.AfterStep(20, parameters).ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace dpl::training
