#include "training/placement_choice.hpp"

#include <string>

#include "common/log.hpp"
#include "training/precision.hpp"

namespace dpl::training {
namespace {

// Rank 0's word on the choices of `auto` flags that differ from what the flag's name suggests.
void SayWhatAutoChose(const TrainingConfig& config, const PlacementSettings& settings,
                      const LocalGroup& local) {
  if (settings.shard_optimizer && config.shard_optimizer == OptimizerSharding::kAuto) {
    log::Info("each of this machine's " + std::to_string(local.local_world_size) +
              " workers keeps the optimizer state of its part of the parameters (--shard-optimizer "
              "auto; off keeps the whole state in each)");
  }
  if (settings.wire.float32_on_one_machine) {
    const std::string precision = NameOf(PrecisionNames(), config.precision);
    log::Info(
        "the gradients are summed in float32 on this one machine (--grad-compression auto "
        "sends " +
        precision + " buckets only between machines; with --local-reduce backend, " +
        "--grad-compression " + precision + " sends them here too)");
  }
}

}  // namespace

PlacementSettings ChoosePlacement(const TrainingConfig& config, const WorkerIdentity& identity,
                                  const LocalGroup& local, bool keeps_live_state) {
  PlacementSettings settings;
  settings.rank = identity.rank;
  settings.world_size = identity.world_size;
  settings.mirror_parameters = config.mirror_parameters;
  settings.wire = ResolveGradientWire(config.precision, config.grad_compression,
                                      /*across_machines=*/local.machines > 1);
  settings.bucket_cap_bytes = config.bucket_cap_bytes;
  settings.device = config.device;
  settings.local_reduce = config.local_reduce;
  settings.offload_optimizer = config.offload_optimizer;
  settings.optimizer = config.optimizer.kind;
  settings.local = local;
  settings.keeps_live_state = keeps_live_state;
  settings.shard_optimizer = ParameterPlacement::ShardsOptimizer(config.shard_optimizer, settings);
  if (identity.rank == 0) SayWhatAutoChose(config, settings, local);
  return settings;
}

}  // namespace dpl::training
