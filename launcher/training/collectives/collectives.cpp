#include "training/collectives/collectives.hpp"

#include "common/log.hpp"
#include "training/collectives/backend_collectives.hpp"
#include "training/collectives/shared_memory_collectives.hpp"
#include "training/collectives/store_collectives.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

// A world of one rank: every sum is its own numbers, every vote its own, nothing to wait for.
class OneRankCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  bool Reaches(const DLDevice&) const override { return true; }
  Status SumScalars(const std::string&, std::vector<double>*) override { return Status::Ok(); }
  Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                            const std::string&) override {
    return mine;
  }
  Result<bool> AnyRankSays(const std::string&, int64_t, bool yes) override { return yes; }
  Status Barrier(const std::string&) override { return Status::Ok(); }
  Status BroadcastTensors(const std::vector<DLTensor>&, int, void*,
                          const observability::CollectiveActivity&) override {
    return Status::Ok();
  }
  Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan) override {
    return Status::Error(DPL_ERR_UNSUPPORTED, "a world of one rank has no gradients to sum");
  }
  void Abort(const Status&) override {}

 private:
  std::string name_ = "none";
};

// Whether the workers of this machine are to sum through its shared memory (--local-reduce shm,
// two or more of them).
bool MachineMemoryAsked(const Membership& membership) {
  return membership.local_reduce == LocalReduce::kSharedMemory &&
         membership.local.local_world_size >= 2;
}

// Whether they can: its loader made the memory, and with several machines each has the backend
// instance of its local rank's workers.
bool MachineMemoryUsable(const Membership& membership) {
  const LocalGroup& local = membership.local;
  return MachineMemoryAsked(membership) && local.memory_fd >= 0 &&
         (local.machines == 1 || local.across_machines != nullptr);
}

// Note [A host path beside a device backend]: nccl moves device memory only, but what a regroup
// in place hands over (a rank's live state, Note [Shrink in place] in live_state.hpp) is host
// memory, up to the whole model and its optimizer state, which the store cannot carry (etcd
// refuses a request over 1.5 MiB, and every byte would pass through one server). So where the
// job may regroup in place, a worker of a device backend also connects an instance of a backend
// of host memory among the same ranks (worker/backend_bootstrap.hpp), and the front sends host
// tensors and the few words (the vote, the hashes, the live-state plan) through it. The device's
// tensors, the gradients among them, still go through the job's backend. Abort ends both.
bool AllInHostMemory(const std::vector<DLTensor>& tensors) {
  for (const DLTensor& tensor : tensors) {
    if (!InHostMemory(tensor.device)) return false;
  }
  return true;
}

// The front of one attempt: one thread, the paths of its membership, and which carries what.
class AttemptCollectives final : public Collectives {
 public:
  explicit AttemptCollectives(const Membership& membership)
      : membership_(membership),
        thread_(std::make_unique<CommunicationThread>()),
        world_(OpenWorld()),
        host_(OpenHostPath()),
        store_(OpenStore()),
        machine_(OpenMachine()),
        in_place_sums_(machine_ ? machine_.get() : world_.get()),
        // A backend that moves device memory only (nccl) carries no host words: the host path
        // does where there is one, else the store.
        words_(world_->Reaches(DLDevice{kDLCPU, 0}) ? world_.get()
               : host_                              ? host_.get()
                                                    : store_.get()) {}
  // The thread ends first, running what is queued while the paths it calls still live.
  ~AttemptCollectives() override { thread_.reset(); }

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  const std::string& name() const override { return world_->name(); }
  bool Reaches(const DLDevice& device) const override { return world_->Reaches(device); }
  // Through the store whatever the backend: the same bits on every backend.
  Status SumScalars(const std::string& name, std::vector<double>* values) override {
    return store_->SumScalars(name, values);
  }
  Result<std::vector<uint64_t>> GatherWords(const std::vector<uint64_t>& mine,
                                            const std::string& name) override {
    return words_->GatherWords(mine, name);
  }
  Result<bool> AnyRankSays(const std::string& name, int64_t step, bool yes) override {
    return words_->AnyRankSays(name, step, yes);
  }
  Status Barrier(const std::string& what) override { return world_->Barrier(what); }
  Status BroadcastTensors(const std::vector<DLTensor>& tensors, int root, void* stream,
                          const observability::CollectiveActivity& activity) override {
    const bool host_path = host_ && AllInHostMemory(tensors);
    return (host_path ? host_ : world_)->BroadcastTensors(tensors, root, stream, activity);
  }
  Result<std::unique_ptr<GradientReduction>> ReduceGradients(ReductionPlan plan) override;
  // The thread's signal, then the backend instances of the paths (Note [Aborting collectives]).
  void Abort(const Status& why) override {
    thread_->Abort(why);
    world_->Abort(why);
    if (host_) host_->Abort(why);
    if (machine_) machine_->Abort(why);
  }

 private:
  std::unique_ptr<Collectives> OpenWorld() {
    if (membership_.world_size == 1) return std::make_unique<OneRankCollectives>();
    return std::make_unique<BackendCollectives>(*membership_.backend, *thread_, membership_.rank,
                                                membership_.world_size);
  }
  // Only beside a backend that does not move host memory itself.
  std::unique_ptr<Collectives> OpenHostPath() {
    if (membership_.world_size == 1 || membership_.host_path == nullptr) return nullptr;
    if (world_->Reaches(DLDevice{kDLCPU, 0})) return nullptr;
    return std::make_unique<BackendCollectives>(*membership_.host_path, *thread_, membership_.rank,
                                                membership_.world_size);
  }
  std::unique_ptr<Collectives> OpenStore() {
    if (membership_.world_size == 1) return std::make_unique<OneRankCollectives>();
    return std::make_unique<StoreCollectives>(*membership_.store, membership_.store_prefix,
                                              membership_.rank, membership_.world_size,
                                              membership_.timeout, *thread_);
  }
  // The path of a CPU model's in-place gradients: the machine's memory where its workers have
  // it, else the backend's.
  std::unique_ptr<Collectives> OpenMachine() {
    if (!MachineMemoryUsable(membership_)) return nullptr;
    return std::make_unique<SharedMemoryCollectives>(membership_.local, *thread_);
  }

  Membership membership_;
  std::unique_ptr<CommunicationThread> thread_;  // every path's calls run here
  std::unique_ptr<Collectives> world_;
  std::unique_ptr<Collectives> host_;  // NULL but beside a device-only backend
  std::unique_ptr<Collectives> store_;
  std::unique_ptr<Collectives> machine_;  // NULL where the machine's memory is not usable
  Collectives* in_place_sums_;            // machine_, else world_
  Collectives* words_;                    // world_, host_ or store_
};

// A CPU model's in-place gradients are summed in the machine's memory where its workers have it;
// everything else through the backend.
Result<std::unique_ptr<GradientReduction>> AttemptCollectives::ReduceGradients(ReductionPlan plan) {
  if (!plan.in_place) return world_->ReduceGradients(std::move(plan));
  const bool missing = MachineMemoryAsked(membership_) && !MachineMemoryUsable(membership_);
  if (missing && membership_.local.local_rank == 0) {
    log::Warning(
        "this machine's workers have no shared memory (its loader could not make it); "
        "their gradients are summed through the backend, as --local-reduce backend");
  }
  return in_place_sums_->ReduceGradients(std::move(plan));
}

}  // namespace

Result<std::unique_ptr<Collectives>> OpenCollectives(const Membership& membership) {
  if (membership.world_size > 1 && (membership.backend == nullptr || membership.store == nullptr)) {
    return Status::InvalidArgument("a world of " + std::to_string(membership.world_size) +
                                   " ranks needs its backend and its store");
  }
  return std::unique_ptr<Collectives>(new AttemptCollectives(membership));
}

}  // namespace dpl::training
