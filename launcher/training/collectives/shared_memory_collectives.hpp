// The machine's shared memory as a path of the front (Note [One front for collectives] in
// collectives.hpp): the gradient buckets of a CPU model's workers summed in the memory they share
// (Note [Reduction through shared memory] in local_reduce.hpp); with several machines the
// per-machine hierarchy, each worker's part summed across machines through the backend instance
// of its local rank's workers (LocalGroup::across_machines). It carries gradient buckets only:
// the rest of the front's calls go through the job's backend or the store.
#pragma once

#include <memory>
#include <string>

#include "training/collectives/collectives.hpp"
#include "training/collectives/communication_thread.hpp"

namespace dpl::training {

class SharedMemoryCollectives final : public Collectives {
 public:
  // `group` names a memory file (memory_fd >= 0); `thread` must outlive it.
  SharedMemoryCollectives(const LocalGroup& group, CommunicationThread& thread)
      : group_(group), thread_(thread) {}

  // Among the machine's workers.
  int rank() const override { return group_.local_rank; }
  int size() const override { return group_.local_world_size; }
  const std::string& name() const override { return name_; }
  bool Reaches(const DLDevice& device) const override;

  Status SumScalars(const std::string& name, std::vector<double>* values) override;
  Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                            const std::string& name) override;
  Result<bool> AnyRankSays(const std::string& name, int64_t step, bool yes) override;
  Status Barrier(const std::string& what) override;
  Status BroadcastTensors(const std::vector<DLTensor>& tensors, int root, void* stream,
                          const observability::CollectiveActivity& activity) override;
  // Host float32 gradients, one part of every bucket per worker of the machine.
  Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan plan) override;
  // Raises the thread's signal and aborts the instance across machines, where there is one (Note
  // [Aborting collectives]).
  void Abort(const Status& why) override {
    thread_.Abort(why);
    if (group_.across_machines != nullptr) group_.across_machines->Abort();
  }

 private:
  Status Refuse(const char* call) const;

  LocalGroup group_;
  CommunicationThread& thread_;
  std::string name_ = "the machine's shared memory";
};

}  // namespace dpl::training
