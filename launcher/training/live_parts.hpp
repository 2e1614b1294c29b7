// The sharded optimizer's part of a shrink in place (Note [Shrink in place] in live_state.hpp,
// Note [A copy of each part] in part_copy.hpp): the ranks of the next attempt say which parts of
// the last attempt's optimizer state they hold and at which step, one holder is chosen for each
// part at the newest committed step, and every part goes from its holder to every rank, which
// takes its own part (and its copy) of the new cut from the whole.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/collectives.hpp"
#include "training/optimizer.hpp"
#include "training/part_copy.hpp"

namespace dpl::training {

// The words a rank says about what it holds (PlanLiveState reads every rank's).
inline constexpr size_t kLiveWords = 8;
std::vector<uint64_t> LiveWords(bool has_state, int64_t committed_step, const KeptParts* parts);

// Where a part of the last attempt's optimizer state comes from: rank `rank`, its part as at its
// committed step or, with `next`, the one updated after it.
struct PartSource {
  int rank = -1;
  bool next = false;
};

// What the ranks take from whom.
struct LivePlan {
  int source = -1;  // the rank of the newest committed step (lowest such): every rank takes its
                    // state; -1: no rank holds one
  int64_t step = 0;
  int parts = 0;  // the parts the optimizer's state comes in (0: whole, in the source's state)
  uint64_t layout_fingerprint = 0;
  std::vector<PartSource> part_sources;
  // Why the ranks' live states cannot make the state whole (two machines that held the same part
  // lost at once); empty where they can.
  std::string missing;
};

// From every rank's LiveWords, back to back.
Result<LivePlan> PlanLiveState(const std::vector<uint64_t>& words);

// Every part of `plan` from its holder to every rank, into `values` (per parameter, of `sizes`
// elements) and `state` (state k of parameter p whole, `states` of them). `mine` is what this
// rank holds (NULL: none); the parts' cut is that of the run's buckets (`bucket_cap_bytes`).
Status HandOverParts(Collectives& collectives, const LivePlan& plan, const KeptParts* mine,
                     const std::vector<size_t>& sizes, int64_t bucket_cap_bytes, size_t states,
                     std::vector<std::vector<float>>* values, OptimizerState* state);

}  // namespace dpl::training
