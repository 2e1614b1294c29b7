// The backend's path of the front (Note [One front for collectives] in collectives.hpp): the job's
// backend plugin instance, every call on the front's communication thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "training/collectives/backend.hpp"
#include "training/collectives/collectives.hpp"
#include "training/collectives/communication_thread.hpp"

namespace dpl::training {

class BackendCollectives final : public Collectives {
 public:
  // `backend` and `thread` must outlive it.
  BackendCollectives(Backend& backend, CommunicationThread& thread, int rank, int size)
      : backend_(backend), thread_(thread), rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return backend_.name(); }
  // Host memory (kDLCPU, page-locked too) for a host backend; its device's memory otherwise.
  bool Reaches(const DLDevice& device) const override;

  // In float64, the backend's order of addition.
  Status SumScalars(const std::string& name, std::vector<double>* values) override;
  // Through the backend's allgather of host memory.
  Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                            const std::string& name) override;
  // One float summed in host memory.
  Result<bool> AnyRankSays(const std::string& name, int64_t step, bool yes) override;
  Status Barrier(const std::string& what) override;
  Status BroadcastTensors(const std::vector<DLTensor>& tensors, int root, void* stream,
                          const observability::CollectiveActivity& activity) override;
  // The buckets allreduced (backend_reductions.cpp), or reduce-scattered for plan.sharded.
  Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan plan) override;
  // Raises the thread's signal and aborts the backend instance (Note [Aborting collectives]).
  void Abort(const Status& why) override;

 private:
  Backend& backend_;
  CommunicationThread& thread_;
  int rank_;
  int size_;
};

// The buckets of `plan` allreduced through `backend` on `thread` (Note [Buckets in place]).
std::unique_ptr<GradientReduction> AllreduceBuckets(Backend& backend, CommunicationThread& thread,
                                                    ReductionPlan plan);
// The buckets of `plan` reduce-scattered through `backend` on `thread` for the sharded optimizer:
// each bucket staged into `size` equal slots, this rank's (`rank`) summed and scaled.
std::unique_ptr<GradientReduction> ReduceScatterBuckets(Backend& backend,
                                                        CommunicationThread& thread, int rank,
                                                        int size, ReductionPlan plan);

// Sums `data` (host float32) over `backend`'s ranks in `wire`'s 16-bit format (kFp16 or kBf16):
// each element times `scale` (before the sum, so that the sum of the ranks' values stays in
// range), rounded once into `rounded` (grown to `count`), allreduced, and widened back into
// `data`. The backend's error as it is; DPL_ERR_UNSUPPORTED leaves `data` as it was.
Status AllreduceIn16Bits(Backend& backend, WireFormat wire, float* data, size_t count, float scale,
                         std::vector<uint16_t>* rounded);
// Sums `data` (host float32) over `backend`'s ranks times `scale`: in float32, the sum then
// scaled, or in a 16-bit `wire` (AllreduceIn16Bits). On the front's thread.
Status SumHostFloats(Backend& backend, WireFormat wire, float* data, size_t count, float scale,
                     std::vector<uint16_t>* rounded);

}  // namespace dpl::training
