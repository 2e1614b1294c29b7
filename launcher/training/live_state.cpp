#include "training/live_state.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.hpp"

namespace dpl::training {
namespace {

int64_t Bits(double value) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

double FromBits(int64_t bits) {
  double value = 0.0;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Every buffer of `state` that holds bytes, in one order on every rank.
std::vector<std::vector<uint8_t>*> Payload(CheckpointState* state) {
  std::vector<std::vector<uint8_t>*> payload;
  for (NamedTensor& entry : state->model) payload.push_back(&entry.tensor.data);
  for (OptimizerStateTensor& entry : state->optimizer_state) payload.push_back(&entry.tensor.data);
  payload.push_back(&state->rng_state);
  return payload;
}

// What a state holds besides its tensors, and the sizes that must match, as words.
enum Word : size_t {
  kEpoch,
  kStepInEpoch,
  kGlobalStep,
  kOptimizerSteps,
  kRngBytes,
  kTensors,
  kBytes,
  kHasScaler,
  kScale,
  kGrowthTracker,
  kSkippedSteps,
  kHasValidation,
  kBestLoss,
  kEvaluations,
  kWithoutImprovement,
  kWords
};

std::vector<int64_t> Header(CheckpointState* state) {
  std::vector<int64_t> words(kWords, 0);
  words[kEpoch] = state->epoch;
  words[kStepInEpoch] = state->step_in_epoch;
  words[kGlobalStep] = state->global_step;
  words[kOptimizerSteps] = state->optimizer_steps;
  words[kRngBytes] = int64_t(state->rng_state.size());
  const std::vector<std::vector<uint8_t>*> payload = Payload(state);
  words[kTensors] = int64_t(payload.size());
  words[kBytes] = int64_t(StateBytes(*state));
  if (state->scaler) {
    words[kHasScaler] = 1;
    words[kScale] = Bits(state->scaler->scale);
    words[kGrowthTracker] = state->scaler->growth_tracker;
    words[kSkippedSteps] = state->scaler->skipped_steps;
  }
  if (state->validation) {
    words[kHasValidation] = 1;
    words[kBestLoss] = Bits(state->validation->best_loss);
    words[kEvaluations] = state->validation->evaluations;
    words[kWithoutImprovement] = state->validation->without_improvement;
  }
  return words;
}

// The source's header into this rank's state, whose layout must be the source's.
Status TakeHeader(const std::vector<int64_t>& words, int source, CheckpointState* state) {
  state->rng_state.resize(size_t(words[kRngBytes]));
  const std::vector<int64_t> mine = Header(state);
  if (mine[kTensors] != words[kTensors] || mine[kBytes] != words[kBytes]) {
    return Status::InvalidArgument(
        "the live state of rank " + std::to_string(source) + " holds " +
        std::to_string(words[kTensors]) + " tensors of " + std::to_string(words[kBytes]) +
        " bytes, but this rank's model has " + std::to_string(mine[kTensors]) + " of " +
        std::to_string(mine[kBytes]) + ": the ranks do not run the same model and options");
  }
  state->epoch = words[kEpoch];
  state->step_in_epoch = words[kStepInEpoch];
  state->global_step = words[kGlobalStep];
  state->optimizer_steps = words[kOptimizerSteps];
  if (words[kHasScaler] != 0) {
    // The scaler's settings are this run's own (every rank has the same); its state the source's.
    ScalerCheckpoint scaler = state->scaler.value_or(ScalerCheckpoint{});
    scaler.scale = FromBits(words[kScale]);
    scaler.growth_tracker = words[kGrowthTracker];
    scaler.skipped_steps = words[kSkippedSteps];
    state->scaler = scaler;
  } else {
    state->scaler.reset();
  }
  state->validation.reset();
  if (words[kHasValidation] != 0) {
    state->validation = ValidationCheckpoint{FromBits(words[kBestLoss]), words[kEvaluations],
                                             words[kWithoutImprovement]};
  }
  return Status::Ok();
}

DLTensor BytesTensor(void* data, int64_t* count) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLUInt, 8, 1};
  tensor.shape = count;
  return tensor;
}

}  // namespace

uint64_t StateBytes(const CheckpointState& state) {
  uint64_t bytes = state.rng_state.size();
  for (const NamedTensor& entry : state.model) bytes += entry.tensor.data.size();
  for (const OptimizerStateTensor& entry : state.optimizer_state) {
    bytes += entry.tensor.data.size();
  }
  return bytes;
}

Result<LivePlan> ChooseLiveSource(Collectives& collectives, const std::optional<LiveState>& live) {
  const std::vector<uint64_t> mine = LiveWords(live.has_value(), live ? live->state.global_step : 0,
                                               live && live->parts ? &*live->parts : nullptr);
  DPL_ASSIGN_OR_RETURN(std::vector<uint64_t> all, collectives.GatherWords(mine, "live-state"));
  DPL_ASSIGN_OR_RETURN(LivePlan plan, PlanLiveState(all));
  if (!plan.missing.empty()) {
    if (collectives.rank() == 0) {
      log::Warning("the machines lost took part of the optimizer's state with them: " +
                   plan.missing + "; the run continues from the newest checkpoint");
    }
    plan.source = -1;
  }
  return plan;
}

Status HandOverState(Collectives& collectives, int source, CheckpointState* state) {
  const bool sends = collectives.rank() == source;
  std::vector<int64_t> header = Header(state);
  int64_t header_bytes = int64_t(header.size() * sizeof(int64_t));
  observability::CollectiveActivity activity;
  activity.collective = "broadcast";
  activity.bytes = uint64_t(header_bytes);
  DPL_RETURN_IF_ERROR(collectives.BroadcastTensors({BytesTensor(header.data(), &header_bytes)},
                                                   source, nullptr, activity));
  if (!sends) DPL_RETURN_IF_ERROR(TakeHeader(header, source, state));
  const std::vector<std::vector<uint8_t>*> payload = Payload(state);
  std::vector<int64_t> counts;
  counts.reserve(payload.size());
  std::vector<DLTensor> tensors;
  for (std::vector<uint8_t>* bytes : payload) {
    if (bytes->empty()) continue;
    counts.push_back(int64_t(bytes->size()));
    tensors.push_back(BytesTensor(bytes->data(), &counts.back()));
  }
  activity.bytes = StateBytes(*state);
  return collectives.BroadcastTensors(tensors, source, nullptr, activity);
}

void KeepLiveStateOf(const LiveRun& run, const TrainingPosition& committed,
                     std::optional<LiveState>* live) {
  run.collectives.Abort(Status::Communication("the run failed"));
  if (run.step.reducer->SharesValues()) return;
  OptimizerRunner& optimizer = *run.step.optimizer;
  std::optional<KeptParts> parts;
  if (optimizer.sharded()) {
    parts = optimizer.KeepParts(committed.global_step);
    if (!parts) return;  // no rank holds the state whole: the newest checkpoint
  }
  Result<CheckpointState> captured =
      run.checkpoints.CaptureLive(committed, run.model, *run.step.placement, optimizer);
  if (!captured.ok()) {
    log::Warning("cannot keep the state of step " + std::to_string(committed.global_step) +
                 " in memory: " + captured.status().message());
    return;
  }
  if (parts) {  // as they were at the committed step (an update may have begun since)
    captured->optimizer_steps = parts->optimizer_steps;
    if (captured->scaler && parts->loss_scaling) {
      captured->scaler->scale = double(parts->loss_scaling->scaler.scale);
      captured->scaler->growth_tracker = parts->loss_scaling->scaler.growth_tracker;
      captured->scaler->skipped_steps = parts->loss_scaling->skipped_steps;
    }
  }
  *live = LiveState{std::move(*captured), std::move(parts)};
}

namespace {

// The parts of the sharded optimizer's state from their holders into `state` (which holds the
// source's values and no optimizer state), as a checkpoint holds them.
Status TakeParts(const LiveRun& run, const LivePlan& plan, const KeptParts* mine,
                 CheckpointState* state) {
  const std::vector<HostParameter>& parameters = run.step.placement->parameters();
  const std::vector<std::string> names = run.step.optimizer->StateNames();
  std::vector<size_t> sizes;
  for (const HostParameter& p : parameters) sizes.push_back(p.elements);
  std::vector<std::vector<float>> values;
  OptimizerState whole;
  DPL_RETURN_IF_ERROR(HandOverParts(run.collectives, plan, mine, sizes, run.bucket_cap_bytes,
                                    names.size(), &values, &whole));
  for (NamedTensor& entry : state->model) {
    for (size_t p = 0; p < parameters.size(); ++p) {
      if (entry.name != parameters[p].name) continue;
      const auto* bytes = reinterpret_cast<const uint8_t*>(values[p].data());
      entry.tensor.data.assign(bytes, bytes + values[p].size() * sizeof(float));
    }
  }
  state->optimizer_state = OptimizerStateTensors(parameters, names, whole);
  return Status::Ok();
}

}  // namespace

Result<TrainingPosition> TakeLiveState(const LiveRun& run, int rank, const LivePlan& plan,
                                       std::optional<LiveState>* live) {
  const auto began = std::chrono::steady_clock::now();
  const int source = plan.source;
  CheckpointState state;
  if (rank == source) {
    state = std::move((*live)->state);
  } else {  // the source's layout, to receive into
    DPL_ASSIGN_OR_RETURN(
        state, run.checkpoints.CaptureLive(TrainingPosition{}, run.model, *run.step.placement,
                                           *run.step.optimizer));
  }
  Status handed = HandOverState(run.collectives, source, &state);
  if (handed.ok() && plan.parts > 0) {
    handed = TakeParts(run, plan, *live && (*live)->parts ? &*(*live)->parts : nullptr, &state);
  }
  if (!handed.ok()) {
    if (rank == source) (*live)->state = std::move(state);
    return handed;
  }
  live->reset();
  DPL_ASSIGN_OR_RETURN(
      const TrainingPosition position,
      run.checkpoints.Apply(state, "the live state of rank " + std::to_string(source), run.model,
                            *run.step.placement, *run.step.optimizer));
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    const std::string parts = plan.parts > 0 ? ", the optimizer's " + std::to_string(plan.parts) +
                                                   " parts from the ranks that held them"
                                             : "";
    log::Info("continuing from step " + std::to_string(position.global_step) + " (epoch " +
              std::to_string(position.epoch) + ", batch " + std::to_string(position.step_in_epoch) +
              ") with the state rank " + std::to_string(source) + " held in memory" + parts + " (" +
              log::Bytes(StateBytes(state)) + " to every rank in " + log::Duration(seconds) +
              "; nothing read from disk)");
  }
  return position;
}

}  // namespace dpl::training
