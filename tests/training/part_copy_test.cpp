// Note [A copy of each part] (training/part_copy.hpp) without a launcher: two ranks of a sharded
// AdamW, each with a copy of the other's part, as two optimizer runners of this thread whose
// exchanges reach each other's memory. After a failure at any point of a step, what a rank keeps
// of the other's part must be the bits its owner keeps of it.
#include "training/part_copy.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fakes/summed_part.hpp"
#include "training/collectives/buckets.hpp"
#include "training/host_tensor.hpp"
#include "training/optimizer_runner.hpp"
#include "training/step_plan.hpp"

namespace dpl::training {
namespace {

using Source = std::function<const float*(const ParameterRun&)>;
using Destination = std::function<float*(const ParameterRun&)>;

// One rank's side of the two ranks' reduction, its sums done: it holds its part's averaged
// gradients. A gather completes when both ranks have called it, as a collective does; the first
// caller's destination is written during the second's call.
class PeerExchange final : public fakes::SummedPart {
 public:
  PeerExchange(const ShardLayout& layout, int part, std::vector<float>* gradients)
      : SummedPart(layout, part, gradients) {}
  void Meet(PeerExchange* peer) { peer_ = peer; }

  std::string Describe() const override { return "two ranks in one thread"; }
  Status ShareEntries(std::vector<double>*) override { return Status::Ok(); }
  Status GatherParts(const Source& source, const Destination& destination, bool) override {
    if (!peer_->waiting_) {
      waiting_.emplace(source, destination);
      return Status::Ok();
    }
    Move(peer_->waiting_->first, part_ == 0 ? 1 : 0, destination);
    Move(source, part_, peer_->waiting_->second);
    peer_->waiting_.reset();
    return Status::Ok();
  }

 private:
  void Move(const Source& from, int part, const Destination& to) const {
    for (const ParameterRun& run : layout_.PartOfEveryBucket(part)) {
      float* into = to(run);
      if (into != nullptr) std::copy(from(run), from(run) + run.elements, into);
    }
  }

  PeerExchange* peer_ = nullptr;
  std::optional<std::pair<Source, Destination>> waiting_;
};

// A 1-D tensor (not decayed by AdamW), and two 2-D ones (decayed): four pieces of elements
// (Note [Pieces]), two parts of two.
const std::vector<size_t> kSizes = {5000, 24, 9000};
const std::vector<std::vector<int64_t>> kShapes = {{5000}, {4, 6}, {90, 100}};

TrainingConfig AdamW() {
  TrainingConfig config;
  config.optimizer.kind = OptimizerKind::kAdamW;
  config.optimizer.learning_rate = 0.01;
  config.optimizer.weight_decay = 0.1;
  config.evaluate = false;
  return config;
}

struct Rank {
  std::vector<std::vector<int64_t>> shapes = kShapes;
  std::vector<float> values;
  std::vector<float> gradients;  // its part's averaged gradients
  std::vector<HostParameter> parameters;
  std::unique_ptr<PeerExchange> exchange;
  std::unique_ptr<UpdateShare> share;
  std::unique_ptr<OptimizerRunner> runner;

  Rank(const ShardLayout& layout, int part) : values(layout.elements()) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::cos(float(i));
    size_t offset = 0;
    for (size_t p = 0; p < kSizes.size(); ++p) {
      HostParameter parameter;
      parameter.name = "p" + std::to_string(p);
      parameter.elements = kSizes[p];
      parameter.value = values.data() + offset;
      parameter.model_value = HostTensor(parameter.value, DLDataType{kDLFloat, 32, 1},
                                         int(shapes[p].size()), shapes[p].data());
      parameters.push_back(parameter);
      offset += kSizes[p];
    }
    for (const ParameterRun& run : layout.PartOfEveryBucket(part)) {
      gradients.resize(gradients.size() + run.elements);
    }
    exchange = std::make_unique<PeerExchange>(layout, part, &gradients);
  }
  void Start(const TrainingConfig& config, int part) {
    share = ShareOf(parameters, *exchange);
    auto made =
        HostOptimizerRunner(config, parameters, *share, StepPlan(config, 100), part, nullptr,
                            PartKeeping{/*copied_part=*/1 - part, false, /*copy_holder=*/1 - part});
    ASSERT_TRUE(made.ok()) << made.status().message();
    runner = std::move(*made);
  }
};

class TwoRanks {
 public:
  TwoRanks() : layout_(kSizes, AssignBuckets(kSizes, 1 << 30), 2) {
    for (int part = 0; part < 2; ++part)
      ranks_[size_t(part)] = std::make_unique<Rank>(layout_, part);
    ranks_[0]->exchange->Meet(ranks_[1]->exchange.get());
    ranks_[1]->exchange->Meet(ranks_[0]->exchange.get());
    for (int part = 0; part < 2; ++part) ranks_[size_t(part)]->Start(AdamW(), part);
  }
  Rank& rank(int r) { return *ranks_[size_t(r)]; }

  // The update of step `step` + 1 on both ranks, gradients of that step; committed once both
  // have gathered the updated parts (`commit`).
  void Update(int64_t step, bool commit) {
    for (int r = 0; r < 2; ++r) {
      std::vector<float>& gradients = rank(r).gradients;
      for (size_t i = 0; i < gradients.size(); ++i) {
        gradients[i] = std::sin(0.37f * float(i) + float(step)) * float(1 + r);
      }
    }
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(rank(r).runner->Step(step, 1.0f).ok());
    if (!commit) return;
    StepProfile profile;
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(rank(r).share->PublishParts(&profile).ok());
  }

 private:
  ShardLayout layout_;
  std::array<std::unique_ptr<Rank>, 2> ranks_;
};

// What rank `holder` keeps of the other's part equals what its owner keeps of it, both steps.
void ExpectCopyIsOwners(const KeptParts& owner, const KeptParts& holder) {
  ASSERT_EQ(owner.held.size(), 2u);
  ASSERT_EQ(holder.held.size(), 2u);
  EXPECT_EQ(holder.held[1].part, owner.held[0].part);
  EXPECT_EQ(holder.held[1].committed, owner.held[0].committed);
  EXPECT_EQ(holder.held[1].next, owner.held[0].next);
}

void ExpectEveryPartKept(TwoRanks& ranks, int64_t committed, bool with_next) {
  std::optional<KeptParts> kept[2];
  for (int r = 0; r < 2; ++r) {
    kept[r] = ranks.rank(r).runner->KeepParts(committed);
    ASSERT_TRUE(kept[r].has_value());
    EXPECT_EQ(kept[r]->committed_step, committed);
    EXPECT_EQ(kept[r]->held[0].next.empty(), !with_next);
  }
  ExpectCopyIsOwners(*kept[0], *kept[1]);
  ExpectCopyIsOwners(*kept[1], *kept[0]);
  if (with_next) {
    EXPECT_NE(kept[0]->held[0].committed, kept[0]->held[0].next);
  }
}

// Between steps the copy's update of the committed step has not run yet (it runs late).
TEST(PartCopy, BetweenStepsTheCopyIsAtTheCommittedStep) {
  TwoRanks ranks;
  for (int64_t step = 0; step < 3; ++step) ranks.Update(step, /*commit=*/true);
  ExpectEveryPartKept(ranks, 3, /*with_next=*/false);
}

// Both ranks updated step 4, neither gathered it: every part at step 3 and at step 4.
TEST(PartCopy, AnUpdateNotGatheredKeepsBothSteps) {
  TwoRanks ranks;
  for (int64_t step = 0; step < 3; ++step) ranks.Update(step, /*commit=*/true);
  ranks.Update(3, /*commit=*/false);
  ExpectEveryPartKept(ranks, 3, /*with_next=*/true);
}

// The first step's update not gathered: the copy's committed values are the model's start.
TEST(PartCopy, TheFirstStepNotGatheredKeepsTheStart) {
  TwoRanks ranks;
  ranks.Update(0, /*commit=*/false);
  ExpectEveryPartKept(ranks, 0, /*with_next=*/true);
}

// A restore writes the model's values and the state after the copy was made: with no update of
// its own pending, the copy takes the model's values, kept at once or updated by the next step.
void Restore(TwoRanks& ranks) {
  for (int r = 0; r < 2; ++r) {
    OptimizerRunner& runner = *ranks.rank(r).runner;
    OptimizerState state(runner.StateNames().size());
    for (std::vector<std::vector<float>>& parameters : state) {
      for (size_t size : kSizes) parameters.emplace_back(size, 0.25f);
    }
    ASSERT_TRUE(runner.RestoreState(state).ok());
    runner.set_optimizer_steps(1);  // as a checkpoint's restore does
    for (float& value : ranks.rank(r).values) value = 0.5f;
  }
}

TEST(PartCopy, AfterARestoreTheCopyHasTheModelsValues) {
  TwoRanks kept_at_once;
  kept_at_once.Update(0, /*commit=*/true);
  Restore(kept_at_once);
  ExpectEveryPartKept(kept_at_once, 1, /*with_next=*/false);

  TwoRanks updated;
  updated.Update(0, /*commit=*/true);
  Restore(updated);
  updated.Update(1, /*commit=*/true);
  ExpectEveryPartKept(updated, 2, /*with_next=*/false);
}

}  // namespace
}  // namespace dpl::training
