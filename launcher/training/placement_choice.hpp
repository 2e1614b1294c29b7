// How a worker's parameters, gradients and optimizer state are placed (placement.hpp's
// PlacementSettings), from the flags and the machine: the `auto` choices made, and said by rank 0
// where they differ from what the flag's name suggests.
#pragma once

#include "training/collectives/local_reduce.hpp"
#include "training/config.hpp"
#include "training/placement.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

PlacementSettings ChoosePlacement(const TrainingConfig& config, const WorkerIdentity& identity,
                                  const LocalGroup& local, bool keeps_live_state);

}  // namespace dpl::training
