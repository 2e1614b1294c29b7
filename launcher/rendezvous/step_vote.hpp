// A yes/no vote of every rank at a step boundary, agreed through the store: how the ranks of a
// job whose backend moves device memory only agree on a preemption (Note [Preemption] in
// training/preemption.cpp). Keys, under the attempt's prefix: "<name>/<step>/yes" and
// "<name>/<step>/arrived" (counters) and "<name>/<step>/done" (set by the last rank to arrive);
// that rank also deletes the keys of the step before, which every rank has left by then (the
// ranks go through the step's collectives in lockstep), so the store holds the keys of two
// steps at most.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// Whether any of the `world_size` ranks voted yes at `step`; every rank calls it once per step, in
// step order, and gets the same answer. Three store calls per rank, four more for the last one.
Result<bool> AnyRankVoted(StoreClient& client, const std::string& attempt_prefix,
                          const std::string& name, int64_t step, int world_size, bool yes,
                          std::chrono::milliseconds timeout);

}  // namespace dpl::rendezvous
