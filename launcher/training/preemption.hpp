// Preemption (Note [Preemption] in preemption.cpp): a scheduler's SIGTERM or SIGUSR1 to any
// process of the job makes every rank write the checkpoint of the same step, at the next optimizer
// step boundary, and stop.
#pragma once

#include <cstdint>
#include <functional>

#include "common/status.hpp"

namespace dpl::training {

// Records that this process was asked to stop for a preemption. Async-signal-safe: a signal
// handler calls it.
void RequestPreemption();
// Whether RequestPreemption was called in this process.
bool PreemptionRequested();

// At every optimizer step boundary, on every rank, in the same order: whether the run stops here
// for a preemption, the same answer on every rank. The trainer then writes the checkpoint of this
// step (if it was not due anyway), waits until every rank is there, and returns.
using PreemptionCheck = std::function<Result<bool>(int64_t global_step)>;

}  // namespace dpl::training
