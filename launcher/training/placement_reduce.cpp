// The in-place strategy's ways to sum a CPU model's gradients besides the backend's allreduce:
// through the machine's shared memory (Note [Reduction through shared memory]) and, for the
// sharded optimizer, reduce-scattered through the backend (Note [Sharded optimizer]).
#include "common/log.hpp"
#include "training/host_tensor.hpp"
#include "training/placement.hpp"
#include "training/shard.hpp"

namespace dpl::training {
namespace {

std::vector<size_t> SizesOf(const std::vector<HostParameter>& parameters) {
  std::vector<size_t> sizes;
  for (const HostParameter& p : parameters) sizes.push_back(p.elements);
  return sizes;
}

}  // namespace

bool ParameterPlacement::UsesSharedMemory() const {
  if (!AsksSharedMemorySums(settings_)) return false;
  const LocalGroup& local = settings_.local;
  if (local.memory_fd >= 0 && (local.machines == 1 || local.across_machines != nullptr)) {
    return true;
  }
  if (local.local_rank == 0) {
    log::Warning(
        "this machine's workers have no shared memory (its loader could not make it); "
        "their gradients are summed through the backend, as --local-reduce backend");
  }
  return false;
}

// Where the shared memory's sums go next, and in which format (Note [16-bit gradients between
// machines only]).
std::string ParameterPlacement::AcrossMachinesText() const {
  const LocalGroup& local = settings_.local;
  if (local.machines > 1) {
    return ", their parts then across the " + std::to_string(local.machines) + " machines" +
           WireText();
  }
  if (settings_.wire.format == GradientCompression::kNone) return "";
  return std::string(" (--grad-compression ") + NameOf(CompressionNames(), settings_.wire.format) +
         " applies between machines only)";
}

Status ParameterPlacement::StartSharedMemory(std::vector<DLTensor> tensors) {
  const LocalGroup& local = settings_.local;
  const bool sharded = settings_.shard_optimizer;
  std::vector<Bucket> buckets = AssignBuckets(SizesOf(parameters_), settings_.bucket_cap_bytes);
  ShardLayout layout(SizesOf(parameters_), buckets, local.local_world_size);
  const size_t entries = size_t(local.local_world_size) + layout.pieces();
  const bool share = sharded && model_.CanShareParameters();  // Note [Shared parameters]
  DPL_ASSIGN_OR_RETURN(
      reducer_, LocalReducer::Create(local, std::move(layout), settings_.wire.format, sharded,
                                     entries, share));
  if (model_.ReplacesGradients()) reducer_->KeepGradients();
  if (share) DPL_RETURN_IF_ERROR(ShareValues());
  if (model_.CanShareGradients() && reducer_->UseModelGradients()) {
    DPL_RETURN_IF_ERROR(ShareGradients(&tensors));
  }
  comm_ = std::make_unique<CommunicationThread>();
  reduction_ = std::make_unique<SharedMemoryReduction>(reducer_.get(), tensors, !sharded);
  sync_ = std::make_unique<GradientSynchronizer>(comm_.get(), std::move(tensors), buckets,
                                                 reduction_.get());
  if (settings_.rank == 0) {
    log::Info("gradients of " + std::to_string(parameters_.size()) + " parameters in " +
              std::to_string(buckets.size()) + " bucket(s) of at most " +
              log::Bytes(uint64_t(settings_.bucket_cap_bytes)) +
              ", summed in the shared memory of each machine's " +
              std::to_string(local.local_world_size) + " workers" + AcrossMachinesText() +
              (sharded ? "; each worker of a machine updates its part of the parameters" : "") +
              (SharesValues() ? ", which the machine's workers share (one copy a machine)" : "") +
              (reducer_->reads_model_gradients() ? "; the models keep their gradients there" : ""));
  }
  shared_exchange_ = SharedMemoryExchange(reducer_.get());
  if (sharded) {
    exchange_ = shared_exchange_.get();
  } else {
    // The optimizer reads the averaged gradients where the workers summed them.
    const ShardLayout& shared = reducer_->layout();
    for (size_t b = 0; b < shared.buckets(); ++b) {
      const BucketLayout& bucket = shared.bucket(b);
      for (size_t k = 0; k < bucket.parameters.size(); ++k) {
        parameters_[bucket.parameters[k]].gradient = reducer_->sums(b) + bucket.starts[k];
        gradients_[bucket.parameters[k]] = parameters_[bucket.parameters[k]].gradient;
      }
    }
  }
  ViewPart(*shared_exchange_, /*runs=*/sharded);
  return model_.SetGradientReadyCallback(GradientSynchronizer::GradientReadyTrampoline,
                                         sync_.get());
}

Status ParameterPlacement::StartBackendShard(std::vector<DLTensor> tensors) {
  comm_ = std::make_unique<CommunicationThread>();
  std::vector<Bucket> buckets = AssignBuckets(SizesOf(parameters_), settings_.bucket_cap_bytes);
  ShardLayout layout(SizesOf(parameters_), buckets, settings_.world_size);
  auto shard = std::make_unique<BackendShard>(backend_, comm_.get(), settings_.rank, tensors,
                                              std::move(layout));
  ViewPart(*shard, /*runs=*/true);
  sync_ =
      std::make_unique<GradientSynchronizer>(comm_.get(), std::move(tensors), buckets, shard.get());
  if (settings_.rank == 0) {
    log::Info("gradients of " + std::to_string(parameters_.size()) + " parameters in " +
              std::to_string(buckets.size()) + " bucket(s), reduce-scattered through backend '" +
              backend_->name() + "' in float32" +
              (settings_.wire.format == GradientCompression::kNone ? "" : " (not 16-bit)") +
              "; each rank updates its part of the parameters");
  }
  exchange_ = shard.get();
  reduction_ = std::move(shard);
  return model_.SetGradientReadyCallback(GradientSynchronizer::GradientReadyTrampoline,
                                         sync_.get());
}

void ParameterPlacement::ViewWholeParameters() {
  view_ = UpdateView{};
  for (uint32_t p = 0; p < parameters_.size(); ++p) {
    const HostParameter& parameter = parameters_[p];
    view_.runs.push_back({p, 0, parameter.elements, parameter.value, parameter.gradient});
    view_.first_piece.push_back(view_.pieces);
    view_.pieces += PiecesOf(parameter.elements);
  }
  view_.scaled = view_.runs;
}

// `runs`: the optimizer updates the part only (sharded); else it updates every parameter and
// this rank scales its part of the gradients the machine's workers share (Note [Scaling shared
// gradients]).
void ParameterPlacement::ViewPart(ShardExchange& exchange, bool runs) {
  ViewWholeParameters();
  view_.scaled.clear();
  view_.exchange = &exchange;
  view_.shared_gradients = !runs;
  const ShardLayout& layout = exchange.layout();
  for (size_t b = 0; b < layout.buckets(); ++b) {
    for (const Segment& segment : layout.SegmentsOf(b, exchange.part())) {
      float* value = parameters_[segment.parameter].value + segment.offset;
      view_.scaled.push_back({segment.parameter, segment.offset, segment.length, value,
                              exchange.GradientOf(b, segment)});
    }
  }
  if (runs) view_.runs = view_.scaled;
}

// Note [Shared parameters]: each worker writes the machine's one copy on its own schedule, rank
// 0's initial values as its broadcast arrives (a sender may return before a receiver has written
// them) and then a checkpoint's values. The writes are the same bytes, the last of each worker
// the restored ones; but a worker that went on to train could read another's late write of the
// initial values in between. So all finish writing before any trains.
Status ParameterPlacement::SettleSharedValues() {
  if (!SharesValues()) return Status::Ok();
  return reducer_->Barrier("the parameters' values written into shared memory");
}

Status ParameterPlacement::ShareValues() {
  float* values = reducer_->values();
  if (settings_.local.local_rank == 0) {
    DPL_RETURN_IF_ERROR(model_.ReadTensors(DPL_MODEL_TENSORS_VALUES, values, total_elements_));
  }
  DPL_RETURN_IF_ERROR(reducer_->Barrier("the parameters' values in shared memory"));
  DPL_RETURN_IF_ERROR(model_.ShareParameters(values, total_elements_));
  PlaceBackToBack(values, [this](size_t i, float* value) {
    parameters_[i].value = value;
    parameters_[i].model_value.data = value;
    values_[i] = value;
  });
  return Status::Ok();
}

void ParameterPlacement::PlaceBackToBack(float* base,
                                         const std::function<void(size_t, float*)>& place) {
  size_t offset = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    place(i, base + offset);
    offset += parameters_[i].elements;
  }
}

Status ParameterPlacement::ShareGradients(std::vector<DLTensor>* tensors) {
  float* gradients = reducer_->ModelGradients(settings_.local.local_rank);
  DPL_RETURN_IF_ERROR(model_.ShareGradients(gradients, total_elements_));
  PlaceBackToBack(gradients, [this, tensors](size_t i, float* gradient) {
    parameters_[i].gradient = gradient;
    parameters_[i].model_gradient.data = gradient;
    gradients_[i] = gradient;
    (*tensors)[i].data = gradient;
  });
  return Status::Ok();
}

Status ParameterPlacement::GatherUpdatedParts() {
  // Note [Shared parameters]: every part is already in every worker's parameters; no worker may
  // compute with them before all parts are updated.
  if (SharesValues()) return reducer_->Barrier("the updated parts of the shared parameters");
  auto place = [this](const Segment& segment) {
    return parameters_[segment.parameter].value + segment.offset;
  };
  return exchange_->GatherParts(place, place, /*again=*/false);
}

}  // namespace dpl::training
