// The ranks' step times on their way to rank 0 (Note [Stragglers] in training/stragglers.hpp):
// each rank's newest post under the attempt's prefix, "step_times/rank/<r>", replaced by its
// next; rank 0 reads every rank's. What a post holds is its writer's and reader's to agree
// (worker/step_time_exchange.cpp).
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

Status PostStepTimes(StoreClient& client, const std::string& attempt_prefix, int rank,
                     const std::string& text);
// Every rank's newest post, "" for a rank that posted none yet; without waiting.
Result<std::vector<std::string>> ReadStepTimes(StoreClient& client,
                                               const std::string& attempt_prefix, int world_size);

}  // namespace dpl::rendezvous
