#include "training/preemption.hpp"

#include <atomic>

// Note [Preemption]
// A scheduler that takes a job's machines back (Slurm's preemption, `scontrol requeue`, `scancel`;
// Kubernetes' pod eviction) sends SIGTERM, or with Slurm's --signal a chosen signal such as
// SIGUSR1, to every process of the job and kills them a grace period later (Slurm's KillWait,
// Kubernetes' terminationGracePeriodSeconds: 30 s by default). A signal may reach a launcher, a
// worker, or all of them, at any moment of a step; the ranks must still write the checkpoint of
// one and the same step. So the signal only marks this process (RequestPreemption; a launcher
// passes it on to its workers as SIGUSR1), and at every optimizer step boundary the ranks agree
// whether any of them is marked: the front's vote (Collectives::AnyRankSays), one float summed
// through the backend when it moves host memory, else through the store
// (rendezvous/step_vote.hpp). Every rank learns the same answer at the same step, rank 0 writes
// the checkpoint of that step, every rank waits at the front's barrier until it is on disk, and
// every worker exits with protocol::kPreemptedExitCode. The vote is made only in runs that write
// checkpoints (--checkpoint-dir); its cost per step is in docs/elastic.md.

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

}  // namespace dpl::training
