// The rendezvous store as a path of the front (Note [One front for collectives] in
// collectives.hpp): a few numbers, whatever memory the backend moves. Every call on the front's
// communication thread; its keys lie under the attempt's prefix.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "rendezvous/store.hpp"
#include "training/collectives/collectives.hpp"
#include "training/collectives/communication_thread.hpp"

namespace dpl::training {

class StoreCollectives final : public Collectives {
 public:
  // `store` and `thread` must outlive it.
  StoreCollectives(rendezvous::StoreClient& store, std::string prefix, int rank, int size,
                   std::chrono::milliseconds timeout, CommunicationThread& thread)
      : store_(store),
        prefix_(std::move(prefix)),
        rank_(rank),
        size_(size),
        timeout_(timeout),
        thread_(thread) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  bool Reaches(const DLDevice&) const override { return false; }

  // rendezvous::SumAcrossRanks: in float64, in rank order.
  Status SumScalars(const std::string& name, std::vector<double>* values) override;
  // Through sums of doubles, each word as two exact 32-bit halves (GatherWordsThroughSums).
  Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                            const std::string& name) override;
  // rendezvous::AnyRankVoted.
  Result<bool> AnyRankSays(const std::string& name, int64_t step, bool yes) override;
  // rendezvous::Barrier, keyed by `what`.
  Status Barrier(const std::string& what) override;
  Status BroadcastTensors(const std::vector<DLTensor>& tensors, int root, void* stream,
                          const observability::CollectiveActivity& activity) override;
  Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan plan) override;
  void Abort(const Status& why) override { thread_.Abort(why); }

 private:
  rendezvous::StoreClient& store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  CommunicationThread& thread_;
  std::string name_ = "the store";
};

// Adds a few numbers up over the ranks under a name (SumScalars' form).
using SumOverRanks = std::function<Status(const std::string& name, std::vector<double>* values)>;

// Gathers `mine` from every rank with one `sum` of doubles: each rank writes its words, as exact
// 32-bit halves, into slots of its own and zeros elsewhere. `rank` of `size` ranks.
Result<std::vector<uint64_t>> GatherWordsThroughSums(const SumOverRanks& sum,
                                                     const std::vector<uint64_t>& mine,
                                                     const std::string& name, int rank, int size);

}  // namespace dpl::training
