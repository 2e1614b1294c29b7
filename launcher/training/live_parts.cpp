#include "training/live_parts.hpp"

#include <algorithm>
#include <limits>

#include "training/collectives/buckets.hpp"

namespace dpl::training {
namespace {

constexpr uint64_t kNoPart = std::numeric_limits<uint64_t>::max();

enum Word : size_t { kHas, kStep, kParts, kFingerprint, kHeld, kHeldNext, kCopy, kCopyNext };

struct RankWords {
  const uint64_t* words;
  bool has() const { return words[kHas] != 0; }
  int64_t step() const { return int64_t(words[kStep]); }
};

// The part `part` of `rank` at `step`, if it holds it (Note [A copy of each part]): at its
// committed step, or (one step behind) the part it updated after it, or unchanged where that
// update was a skipped step.
std::optional<PartSource> Holds(const RankWords& rank, int index, int part, int64_t step) {
  for (size_t held : {size_t(kHeld), size_t(kCopy)}) {
    if (rank.words[held] != uint64_t(part)) continue;
    if (rank.step() == step) return PartSource{index, false};
    if (rank.step() + 1 == step) return PartSource{index, rank.words[held + 1] != 0};
  }
  return std::nullopt;
}

Status TakeSources(const std::vector<RankWords>& ranks, LivePlan* plan) {
  for (const RankWords& rank : ranks) {
    if (!rank.has()) continue;
    if (int(rank.words[kParts]) != plan->parts ||
        rank.words[kFingerprint] != plan->layout_fingerprint) {
      return Status::InvalidArgument(
          "the ranks' live states are of optimizer states cut in different ways; the ranks did "
          "not run the same model and options");
    }
  }
  for (int part = 0; part < plan->parts; ++part) {
    std::optional<PartSource> found;
    for (size_t r = 0; r < ranks.size() && !found; ++r) {
      if (ranks[r].has()) found = Holds(ranks[r], int(r), part, plan->step);
    }
    if (!found) {
      plan->missing = "no rank left holds part " + std::to_string(part) + " of the " +
                      std::to_string(plan->parts) +
                      " of the optimizer's state (its rank and the rank that kept its copy "
                      "were lost at once)";
      return Status::Ok();
    }
    plan->part_sources.push_back(*found);
  }
  return Status::Ok();
}

// Copies `count` floats from `from` onward into `to`, advancing `from`.
void Take(const float** from, size_t count, float* to) {
  std::copy(*from, *from + count, to);
  *from += count;
}

}  // namespace

std::vector<uint64_t> LiveWords(bool has_state, int64_t committed_step, const KeptParts* parts) {
  std::vector<uint64_t> words(kLiveWords, 0);
  words[kHas] = has_state ? 1 : 0;
  words[kStep] = uint64_t(committed_step);
  words[kHeld] = words[kCopy] = kNoPart;
  if (parts == nullptr) return words;
  words[kParts] = uint64_t(parts->parts);
  words[kFingerprint] = parts->layout_fingerprint;
  for (size_t h = 0; h < parts->held.size() && h < 2; ++h) {
    words[kHeld + 2 * h] = uint64_t(parts->held[h].part);
    words[kHeldNext + 2 * h] = parts->held[h].next.empty() ? 0 : 1;
  }
  return words;
}

Result<LivePlan> PlanLiveState(const std::vector<uint64_t>& words) {
  std::vector<RankWords> ranks;
  for (size_t at = 0; at + kLiveWords <= words.size(); at += kLiveWords) {
    ranks.push_back({words.data() + at});
  }
  LivePlan plan;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].has()) continue;
    if (plan.source < 0 || ranks[r].step() > plan.step) {
      plan.source = int(r);
      plan.step = ranks[r].step();
      plan.parts = int(ranks[r].words[kParts]);
      plan.layout_fingerprint = ranks[r].words[kFingerprint];
    }
  }
  if (plan.source < 0 || plan.parts == 0) return plan;
  DPL_RETURN_IF_ERROR(TakeSources(ranks, &plan));
  return plan;
}

Status HandOverParts(Collectives& collectives, const LivePlan& plan, const KeptParts* mine,
                     const std::vector<size_t>& sizes, int64_t bucket_cap_bytes, size_t states,
                     std::vector<std::vector<float>>* values, OptimizerState* state) {
  const ShardLayout layout(sizes, AssignBuckets(sizes, bucket_cap_bytes), plan.parts);
  if (layout.Fingerprint() != plan.layout_fingerprint) {
    return Status::InvalidArgument(
        "the optimizer's state was cut into parts another way than this rank cuts it (another "
        "--bucket-cap-mb or model?)");
  }
  values->clear();
  for (size_t n : sizes) values->emplace_back(n, 0.0f);
  state->assign(states, {});
  for (auto& parameters : *state) {
    for (size_t n : sizes) parameters.emplace_back(n, 0.0f);
  }
  observability::CollectiveActivity activity;
  activity.collective = "broadcast";
  for (int part = 0; part < plan.parts; ++part) {
    const PartSource& from = plan.part_sources[size_t(part)];
    const size_t expected = FlatPartElements(layout, part, states);
    std::vector<float> flat(expected, 0.0f);
    if (collectives.rank() == from.rank && mine != nullptr) {
      for (const KeptPart& held : mine->held) {
        if (held.part == part) flat = from.next ? held.next : held.committed;
      }
      if (flat.size() != expected) {
        return Status::Error("this rank's part " + std::to_string(part) + " holds " +
                             std::to_string(flat.size()) + " floats, not " +
                             std::to_string(expected));
      }
    }
    int64_t count = int64_t(flat.size());
    if (count == 0) continue;
    DLTensor tensor{};
    tensor.data = flat.data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = DLDataType{kDLFloat, 32, 1};
    tensor.shape = &count;
    activity.bytes = uint64_t(count) * sizeof(float);
    DPL_RETURN_IF_ERROR(collectives.BroadcastTensors({tensor}, from.rank, nullptr, activity)
                            .WithContext("handing over part " + std::to_string(part) +
                                         " of the optimizer's state"));
    const std::vector<ParameterRun> runs = layout.PartOfEveryBucket(part);
    const float* at = flat.data();
    for (const ParameterRun& run : runs) {
      Take(&at, run.elements, (*values)[run.parameter].data() + run.offset);
    }
    for (size_t k = 0; k < states; ++k) {
      for (const ParameterRun& run : runs) {
        Take(&at, run.elements, (*state)[k][run.parameter].data() + run.offset);
      }
    }
  }
  return Status::Ok();
}

}  // namespace dpl::training
