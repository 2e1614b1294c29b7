// The worker's side of a preemption (Note [Preemption] in training/preemption.cpp): the signals
// that ask for it, and the check the trainer makes at each step boundary.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cli/options.hpp"
#include "training/collectives/collectives.hpp"
#include "training/preemption.hpp"

namespace dpl::worker {

// Whether a preemption can save anything: a training run (a launcher's or one of its workers')
// with --checkpoint-dir.
bool Preemptible(const cli::Options& options);

// From now on SIGUSR1, and SIGTERM from anyone but this process's parent, ask for a preemption
// (training::RequestPreemption). The parent is the launcher once it adopted the worker, and its
// SIGTERM still ends the worker at once, as without a handler: that is how it stops its workers.
void InstallPreemptionHandlers();

// The check at each step boundary: the vote of every rank through the attempt's front
// (Collectives::AnyRankSays; this rank alone at world size 1). `collectives` and `stopped`, set
// once it said to stop, must outlive the check.
training::PreemptionCheck MakePreemptionCheck(training::Collectives& collectives, bool* stopped);

}  // namespace dpl::worker
