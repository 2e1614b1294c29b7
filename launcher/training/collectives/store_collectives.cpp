#include "training/collectives/store_collectives.hpp"

#include "rendezvous/join.hpp"
#include "rendezvous/step_vote.hpp"

namespace dpl::training {
namespace {

constexpr uint64_t kLowHalf = 0xffffffffull;

observability::CollectiveActivity StoreCall(const char* what) {
  observability::CollectiveActivity activity;
  activity.collective = what;
  return activity;
}

}  // namespace

Status StoreCollectives::SumScalars(const std::string& name, std::vector<double>* values) {
  return thread_.Run(
      [&] {
        return rendezvous::SumAcrossRanks(store_, prefix_, name, rank_, size_, values, timeout_);
      },
      StoreCall("store sum"));
}

Result<std::vector<uint64_t>> StoreCollectives::GatherWords(const std::vector<uint64_t>& mine,
                                                            const std::string& name) {
  return GatherWordsThroughSums(
      [this](const std::string& key, std::vector<double>* values) {
        return SumScalars(key, values);
      },
      mine, name, rank_, size_);
}

Result<bool> StoreCollectives::AnyRankSays(const std::string& name, int64_t step, bool yes) {
  bool any = false;
  DPL_RETURN_IF_ERROR(thread_.Run(
      [&]() -> Status {
        DPL_ASSIGN_OR_RETURN(
            any, rendezvous::AnyRankVoted(store_, prefix_, name, step, size_, yes, timeout_));
        return Status::Ok();
      },
      StoreCall("store vote")));
  return any;
}

Status StoreCollectives::Barrier(const std::string& what) {
  return thread_.Run([&] { return rendezvous::Barrier(store_, prefix_, what, size_, timeout_); },
                     StoreCall("store barrier"));
}

Status StoreCollectives::BroadcastTensors(const std::vector<DLTensor>&, int, void*,
                                          const observability::CollectiveActivity&) {
  return Status::Error(DPL_ERR_UNSUPPORTED, "the store carries a few numbers, not tensors");
}

Result<std::unique_ptr<GradientReduction>> StoreCollectives::ReduceGradients(ReductionPlan) {
  return Status::Error(DPL_ERR_UNSUPPORTED, "the store carries a few numbers, not gradients");
}

Result<std::vector<uint64_t>> GatherWordsThroughSums(const SumOverRanks& sum,
                                                     const std::vector<uint64_t>& mine,
                                                     const std::string& name, int rank, int size) {
  std::vector<double> slots(2 * mine.size() * size_t(size), 0.0);
  double* own = slots.data() + 2 * mine.size() * size_t(rank);
  for (size_t i = 0; i < mine.size(); ++i) {
    own[2 * i] = double(mine[i] >> 32);
    own[2 * i + 1] = double(mine[i] & kLowHalf);
  }
  DPL_RETURN_IF_ERROR(sum(name, &slots));
  std::vector<uint64_t> all(mine.size() * size_t(size));
  for (size_t i = 0; i < all.size(); ++i) {
    all[i] = (uint64_t(slots[2 * i]) << 32) | uint64_t(slots[2 * i + 1]);
  }
  return all;
}

}  // namespace dpl::training
