// Which rank hands over which part of the sharded optimizer's state after a shrink in place
// (training/live_parts.hpp, Note [A copy of each part] in training/part_copy.hpp).
#include "training/live_parts.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace dpl::training {
namespace {

constexpr uint64_t kFingerprint = 77;

// A rank that holds part `own` and a copy of part `copy` at `step`; `updated`: both were also
// updated one step on.
KeptParts Holding(int parts, int own, int copy, int64_t step, bool updated) {
  KeptParts kept;
  kept.parts = parts;
  kept.layout_fingerprint = kFingerprint;
  kept.committed_step = step;
  for (int part : {own, copy}) {
    KeptPart held{part, {1.0f}, {}};
    if (updated) held.next = {2.0f};
    kept.held.push_back(held);
  }
  return kept;
}

std::vector<uint64_t> Words(const std::vector<std::vector<uint64_t>>& ranks) {
  std::vector<uint64_t> all;
  for (const auto& words : ranks) all.insert(all.end(), words.begin(), words.end());
  return all;
}

std::vector<uint64_t> Of(const KeptParts& kept) {
  return LiveWords(true, kept.committed_step, &kept);
}

// Three parts, ranks copying the next one's; rank 2 lost. New ranks 0 and 1 are old 0 and 1, a
// new machine (no state) is rank 2.
TEST(PlanLiveState, TheNewestCommittedStepComesFromTheRanksThatHoldEachPart) {
  const KeptParts rank0 = Holding(3, 0, 1, 10, false), rank1 = Holding(3, 1, 2, 10, false);
  const auto plan = PlanLiveState(Words({Of(rank0), Of(rank1), LiveWords(false, 0, nullptr)}));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->source, 0);
  EXPECT_EQ(plan->step, 10);
  EXPECT_EQ(plan->parts, 3);
  EXPECT_TRUE(plan->missing.empty());
  ASSERT_EQ(plan->part_sources.size(), 3u);
  EXPECT_EQ(plan->part_sources[0].rank, 0);
  EXPECT_EQ(plan->part_sources[1].rank, 0);  // the lowest holder
  EXPECT_EQ(plan->part_sources[2].rank, 1);  // the copy of the lost rank's part
  for (const PartSource& source : plan->part_sources) EXPECT_FALSE(source.next);
}

// Rank 1 committed step 11; rank 0 updated its parts to 11 but its gather was cut: its parts come
// as updated, and the step is 11.
TEST(PlanLiveState, ARankOneStepBehindGivesItsUpdatedParts) {
  const KeptParts rank0 = Holding(3, 0, 1, 10, true), rank1 = Holding(3, 1, 2, 11, false);
  const auto plan = PlanLiveState(Words({Of(rank0), Of(rank1)}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source, 1);
  EXPECT_EQ(plan->step, 11);
  ASSERT_EQ(plan->part_sources.size(), 3u);
  EXPECT_EQ(plan->part_sources[0].rank, 0);
  EXPECT_TRUE(plan->part_sources[0].next);
  EXPECT_EQ(plan->part_sources[1].rank, 0);
  EXPECT_TRUE(plan->part_sources[1].next);
  EXPECT_EQ(plan->part_sources[2].rank, 1);
  EXPECT_FALSE(plan->part_sources[2].next);
}

// Every rank updated and none committed: the committed step, from the snapshots.
TEST(PlanLiveState, UpdatesNobodyCommittedAreNotTaken) {
  const KeptParts rank0 = Holding(3, 0, 1, 10, true), rank1 = Holding(3, 1, 2, 10, true);
  const auto plan = PlanLiveState(Words({Of(rank0), Of(rank1)}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->step, 10);
  for (const PartSource& source : plan->part_sources) EXPECT_FALSE(source.next);
}

// Ranks 1 and 2 lost at once: part 2 was theirs alone.
TEST(PlanLiveState, APartNoRankHoldsIsNamed) {
  const KeptParts rank0 = Holding(3, 0, 1, 10, false);
  const auto plan = PlanLiveState(Words({Of(rank0)}));
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->missing.find("part 2 of the 3"), std::string::npos) << plan->missing;
}

TEST(PlanLiveState, StatesCutInDifferentWaysAreRefused) {
  const KeptParts rank0 = Holding(3, 0, 1, 10, false);
  KeptParts rank1 = Holding(3, 1, 2, 10, false);
  rank1.layout_fingerprint = kFingerprint + 1;
  const auto plan = PlanLiveState(Words({Of(rank0), Of(rank1)}));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("cut in different ways"), std::string::npos);
}

TEST(PlanLiveState, WholeStatesNeedNoParts) {
  const auto plan = PlanLiveState(Words(
      {LiveWords(true, 4, nullptr), LiveWords(true, 5, nullptr), LiveWords(false, 0, nullptr)}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source, 1);
  EXPECT_EQ(plan->parts, 0);
  EXPECT_TRUE(plan->part_sources.empty());
}

TEST(PlanLiveState, NoLiveStateAnywhere) {
  const auto plan =
      PlanLiveState(Words({LiveWords(false, 0, nullptr), LiveWords(false, 0, nullptr)}));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->source, -1);
}

TEST(CopiedPartOf, TheNextMachinesPart) {
  EXPECT_EQ(CopiedPartOf(0, 3, 1), 1);
  EXPECT_EQ(CopiedPartOf(2, 3, 1), 0);
  EXPECT_EQ(CopiedPartOf(1, 4, 2), 3);   // two ranks a machine: rank 1 copies rank 3's part
  EXPECT_EQ(CopiedPartOf(0, 2, 2), -1);  // one machine: no other machine to copy to
}

// The holder of each part's copy is the rank whose copied part it is: the inverse of CopiedPartOf.
TEST(CopyHolderOf, TheRankThatCopiesThePart) {
  for (const auto& [parts, per_machine] : {std::pair{3, 1}, {4, 2}, {6, 2}, {6, 3}, {8, 1}}) {
    for (int part = 0; part < parts; ++part) {
      const int holder = CopyHolderOf(part, parts, per_machine);
      ASSERT_GE(holder, 0);
      EXPECT_NE(holder / per_machine, part / per_machine) << "on the part's own machine";
      EXPECT_EQ(CopiedPartOf(holder, parts, per_machine), part) << parts << " " << per_machine;
    }
  }
  EXPECT_EQ(CopyHolderOf(1, 3, 1), 0);
  EXPECT_EQ(CopyHolderOf(0, 3, 1), 2);
  EXPECT_EQ(CopyHolderOf(0, 2, 2), -1);
}

}  // namespace
}  // namespace dpl::training
