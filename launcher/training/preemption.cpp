#include "training/preemption.hpp"

#include <atomic>

#include "training/host_tensor.hpp"

// Note [Preemption]
// A scheduler that takes a job's machines back (Slurm's preemption, `scontrol requeue`, `scancel`;
// Kubernetes' pod eviction) sends SIGTERM, or with Slurm's --signal a chosen signal such as
// SIGUSR1, to every process of the job and kills them a grace period later (Slurm's KillWait,
// Kubernetes' terminationGracePeriodSeconds: 30 s by default). A signal may reach a launcher, a
// worker, or all of them, at any moment of a step; the ranks must still write the checkpoint of
// one and the same step. So the signal only marks this process (RequestPreemption; a launcher
// passes it on to its workers as SIGUSR1), and at every optimizer step boundary the ranks agree
// whether any of them is marked: one float summed through the backend (AnyRankAskedThroughBackend)
// when it moves host memory, else through the store (rendezvous/step_vote.hpp). Every rank learns
// the same answer at the same step, rank 0 writes the checkpoint of that step, every rank waits
// at a barrier until it is on disk, and every worker exits with protocol::kPreemptedExitCode. The
// vote is made only in runs that write checkpoints (--checkpoint-dir); its cost per step is in
// docs/elastic.md.

namespace dpl::training {
namespace {

std::atomic<int> g_preemption_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");

}  // namespace

void RequestPreemption() {
  g_preemption_requested.store(1, std::memory_order_relaxed);
}

bool PreemptionRequested() {
  return g_preemption_requested.load(std::memory_order_relaxed) != 0;
}

Result<bool> AnyRankAskedThroughBackend(Backend& backend, bool asked) {
  float votes = asked ? 1.0f : 0.0f;
  int64_t shape[1] = {1};
  DLTensor tensor = HostTensor(&votes, DLDataType{kDLFloat, 32, 1}, 1, shape);
  DPL_RETURN_IF_ERROR(backend.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr)
                          .WithContext("the ranks' check for a preemption at the step boundary"));
  return votes > 0.0f;
}

}  // namespace dpl::training
