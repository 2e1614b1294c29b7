#include "training/step_parts.hpp"

#include "common/log.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

// A CPU model updates its own memory in place; its gradients are summed there.
Result<StepParts> InPlace(Model& model, Collectives& collectives,
                          const PlacementSettings& settings) {
  StepParts parts;
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<InPlacePlacement> placement,
                       InPlacePlacement::Create(model));
  if (collectives.size() == 1) {
    parts.reducer = LocalGradients(model, *placement);
  } else {
    DPL_ASSIGN_OR_RETURN(parts.reducer, ReduceInPlace(model, *placement, collectives, settings));
  }
  parts.placement = std::move(placement);
  return parts;
}

// The placement's gradients summed on the model's own tensors (or nothing to sum, alone).
Status ReduceOnTheModel(Model& model, Collectives& collectives, const PlacementSettings& settings,
                        StepParts* parts) {
  if (collectives.size() == 1) {
    parts->reducer = LocalGradients(model, *parts->placement);
    return Status::Ok();
  }
  DPL_ASSIGN_OR_RETURN(parts->reducer,
                       ReduceOnModel(model, *parts->placement, collectives, settings));
  return Status::Ok();
}

// The model runs the optimizer where its parameters are (the default where it can).
Result<StepParts> OnTheDevice(Model& model, Collectives& collectives,
                              const PlacementSettings& settings) {
  if (settings.rank == 0) {
    log::Info(
        "the optimizer runs in the model, where its parameters are; --offload-optimizer "
        "runs it in host memory instead");
  }
  StepParts parts;
  parts.optimizer_place = OptimizerPlace::kModel;
  DPL_ASSIGN_OR_RETURN(parts.placement, DeviceValuesPlacement::Create(model));
  DPL_RETURN_IF_ERROR(ReduceOnTheModel(model, collectives, settings, &parts));
  return parts;
}

// A host copy, summed on the model's tensors where the backend reaches them, else in the copy.
Result<StepParts> HostCopy(Model& model, Collectives& collectives,
                           const PlacementSettings& settings, bool backend_reaches_model) {
  StepParts parts;
  if (backend_reaches_model) {
    DPL_ASSIGN_OR_RETURN(parts.placement, HostCopyPlacement::Create(model, settings.rank));
    DPL_RETURN_IF_ERROR(ReduceOnTheModel(model, collectives, settings, &parts));
    return parts;
  }
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<HostSumsPlacement> placement,
                       HostSumsPlacement::Create(model, settings.rank));
  DPL_ASSIGN_OR_RETURN(parts.reducer, ReduceHostCopy(model, *placement, collectives, settings));
  parts.placement = std::move(placement);
  return parts;
}

}  // namespace

Result<StepParts> PlaceParameters(Model& model, Collectives& collectives,
                                  const PlacementSettings& settings) {
  // The model's memory decides whether a host copy is needed; the backend's whether the sums can
  // be made on the model's own tensors. Parameters share one device, so the first one tells.
  dpl_parameter first{};
  const bool has_parameters = model.info().parameter_count > 0;
  if (has_parameters) DPL_RETURN_IF_ERROR(model.Parameter(0, &first));
  const DLDevice device = has_parameters ? first.value.device : DLDevice{kDLCPU, 0};
  if (InHostMemory(device) && !settings.mirror_parameters) {
    return InPlace(model, collectives, settings);
  }
  DPL_RETURN_IF_ERROR(ParameterPlacement::CheckSupported(model.plugin(), settings));
  const bool backend_reaches_model = collectives.Reaches(device);
  const bool device_optimizer = model.Has(ModelCapability::kDeviceOptimizer);
  // Model ABI v4 knows the optimizers of its dpl_optimizer_kind only (optimizer.hpp).
  const bool on_device = FindOptimizerType(settings.optimizer)->on_device.has_value();
  if (backend_reaches_model && device_optimizer && on_device && !settings.offload_optimizer) {
    return OnTheDevice(model, collectives, settings);
  }
  if (!settings.offload_optimizer && settings.rank == 0) {
    log::Info(!device_optimizer ? "the optimizer runs in host memory: model '" + model.name() +
                                      "' does not run one where its parameters are"
              : !on_device
                  ? std::string("the optimizer runs in host memory: the model ABI has no ") +
                        NameOf(OptimizerNames(), settings.optimizer) +
                        " for a model to run where its parameters are"
                  : "the optimizer runs in host memory: backend '" + collectives.name() +
                        "' sums the gradients there, not on the model's device");
  }
  return HostCopy(model, collectives, settings, backend_reaches_model);
}

PartKeeping PartKeepingOf(const TrainingConfig& config, const StepParts& parts,
                          int ranks_per_machine, bool keeps_live_state) {
  PartKeeping keeping;
  keeping.snapshot = keeps_live_state;
  const bool wanted = config.shard_copy == ShardCopy::kOn ||
                      (config.shard_copy == ShardCopy::kAuto && keeps_live_state);
  if (!wanted || parts.optimizer_place != OptimizerPlace::kHostMemory) return keeping;
  const UpdateShare& share = parts.reducer->share();
  const ShardLayout* layout = share.own_part_layout();
  if (layout == nullptr) return keeping;
  keeping.copied_part = CopiedPartOf(share.part(), layout->parts(), ranks_per_machine);
  keeping.copy_holder = CopyHolderOf(share.part(), layout->parts(), ranks_per_machine);
  return keeping;
}

Status AddOptimizer(const TrainingConfig& config, const StepPlan& plan, Model& model, int rank,
                    int threads, StepParts* parts, PartKeeping keeping) {
  const std::vector<HostParameter>& parameters = parts->placement->parameters();
  parts->threads = std::make_unique<ThreadPool>(threads);
  if (parts->optimizer_place == OptimizerPlace::kModel) {
    DPL_ASSIGN_OR_RETURN(parts->optimizer,
                         DeviceOptimizerRunner(config, parameters, model, plan, rank));
    return Status::Ok();
  }
  DPL_ASSIGN_OR_RETURN(parts->optimizer,
                       HostOptimizerRunner(config, parameters, parts->reducer->share(), plan, rank,
                                           parts->threads.get(), keeping));
  return Status::Ok();
}

}  // namespace dpl::training
