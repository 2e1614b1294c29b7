#include "training/checkpoint_policy.hpp"

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "common/log.hpp"
#include "training/buffers.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_folder.hpp"
#include "training/number_text.hpp"
#include "training/resume_checks.hpp"

namespace dpl::training {

using torch_files::TorchDtype;
using torch_files::TorchTensor;
namespace {

std::string Text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// Host floats as a tensor of `shape`.
TorchTensor FloatTensor(const float* values, size_t count, std::vector<int64_t> shape) {
  TorchTensor tensor;
  tensor.dtype = TorchDtype::kFloat32;
  tensor.shape = std::move(shape);
  // assign copies once; resize + memcpy would write every byte twice (zeros first), in the
  // pause of a checkpoint (Note [Checkpoints that do not stop training]).
  const auto* bytes = reinterpret_cast<const uint8_t*>(values);
  tensor.data.assign(bytes, bytes + count * sizeof(float));
  return tensor;
}

std::vector<int64_t> ShapeOf(const DLTensor& tensor) {
  return std::vector<int64_t>(tensor.shape, tensor.shape + tensor.ndim);
}

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// This rank's part of the optimizer's state, copied. With the shared-memory sums across machines
// every machine holds each part (Note [Sharded optimizer] in update_share.hpp): the lowest rank
// that holds it, machine 0's, writes it, and the others' files name no run.
OptimizerPart CapturePart(int64_t global_step, int rank, int world_size,
                          const ParameterPlacement& placement, const OptimizerRunner& optimizer) {
  OptimizerPart part;
  part.global_step = global_step;
  part.rank = rank;
  part.world_size = world_size;
  part.state_names = optimizer.StateNames();
  if (optimizer.part() != rank) return part;
  for (const ShardRun& shard_run : optimizer.Shard()) {
    const ParameterRun& run = shard_run.run;
    OptimizerPartRun copied{placement.parameters()[run.parameter].name, int64_t(run.offset), {}};
    for (const std::vector<float>* state : shard_run.state) {
      copied.state.push_back(FloatTensor(state->data(), run.elements, {int64_t(run.elements)}));
    }
    part.runs.push_back(std::move(copied));
  }
  return part;
}

// Copies the checkpoint's tensor `name` into `out` (`bytes` long), checking shape and dtype.
Status Restore(const std::map<std::string, const TorchTensor*>& tensors, const std::string& name,
               TorchDtype dtype, const std::vector<int64_t>& shape, void* out, size_t bytes,
               const std::string& path) {
  auto found = tensors.find(name);
  if (found == tensors.end()) {
    return Status::InvalidArgument("checkpoint " + path + " has no tensor '" + name +
                                   "'; it was written for another model");
  }
  const TorchTensor& tensor = *found->second;
  if (tensor.dtype != dtype || tensor.shape != shape || tensor.data.size() != bytes) {
    return Status::InvalidArgument("checkpoint " + path + ": tensor '" + name + "' is " +
                                   TorchDtypeName(tensor.dtype) + " " + ShapeText(tensor.shape) +
                                   ", the model has " + TorchDtypeName(dtype) + " " +
                                   ShapeText(shape));
  }
  std::memcpy(out, tensor.data.data(), bytes);
  return Status::Ok();
}

Status RestoreBuffers(const std::map<std::string, const TorchTensor*>& tensors, Model& model,
                      const std::string& path) {
  DPL_ASSIGN_OR_RETURN(std::vector<BufferInfo> buffers, ListBuffers(model));
  if (buffers.empty()) return Status::Ok();
  std::vector<uint8_t> bytes;
  for (const BufferInfo& buffer : buffers) {
    DPL_ASSIGN_OR_RETURN(TorchDtype dtype,
                         TorchDtypeOfDl(buffer.value.dtype, "buffer " + buffer.name));
    const size_t offset = bytes.size();
    bytes.resize(offset + buffer.bytes);
    DPL_RETURN_IF_ERROR(Restore(tensors, buffer.name, dtype, buffer.shape, bytes.data() + offset,
                                buffer.bytes, path));
  }
  return model.WriteBuffers(bytes.data(), bytes.size());
}

// The loss scaler of an fp16 run; a run without one ignores what the checkpoint says.
Status RestoreLossScaling(const CheckpointState& state, OptimizerRunner& optimizer,
                          const std::string& path) {
  if (!optimizer.scales_loss()) return Status::Ok();
  if (!state.scaler) {
    return Status::InvalidArgument("checkpoint " + path +
                                   " has no loss scaler state for --precision fp16; it was not "
                                   "written by an fp16 run");
  }
  const ScalerCheckpoint& saved = *state.scaler;
  LossScalingState scaling;
  scaling.scaler.scale = float(saved.scale);
  scaling.scaler.growth_tracker = int32_t(saved.growth_tracker);
  scaling.skipped_steps = saved.skipped_steps;
  if (double(scaling.scaler.scale) != saved.scale ||
      int64_t(scaling.scaler.growth_tracker) != saved.growth_tracker) {
    return Status::InvalidArgument("checkpoint " + path + " has a loss scale " + Text(saved.scale) +
                                   " or growth tracker " + std::to_string(saved.growth_tracker) +
                                   " that this launcher never writes");
  }
  return optimizer.RestoreLossScaling(scaling).WithContext("checkpoint " + path);
}

// The checkpoint holds every parameter's state whole; each rank takes its runs of it (all of
// them, unless the optimizer is sharded, whatever world size wrote it).
Status RestoreOptimizer(const CheckpointState& state, const ParameterPlacement& placement,
                        OptimizerRunner& optimizer, const std::string& path) {
  std::map<std::string, const TorchTensor*> tensors;
  for (const OptimizerStateTensor& entry : state.optimizer_state) {
    tensors[entry.parameter + "/" + entry.state] = &entry.tensor;
  }
  const std::vector<HostParameter>& parameters = placement.parameters();
  const std::vector<std::string> names = optimizer.StateNames();
  OptimizerState whole(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    for (const HostParameter& p : parameters) {
      whole[k].emplace_back(p.elements);
      DPL_RETURN_IF_ERROR(Restore(tensors, p.name + "/" + names[k], TorchDtype::kFloat32,
                                  ShapeOf(p.model_value), whole[k].back().data(),
                                  p.elements * sizeof(float), path)
                              .WithContext("the optimizer's state"));
    }
  }
  DPL_RETURN_IF_ERROR(optimizer.RestoreState(whole));
  optimizer.set_optimizer_steps(state.optimizer_steps);
  return Status::Ok();
}

}  // namespace

CheckpointPolicy::CheckpointPolicy(const TrainingConfig& config, int rank, int world_size,
                                   ValidationState& validation, int64_t training_samples,
                                   int64_t schedule_steps)
    : config_(config),
      rank_(rank),
      world_size_(world_size),
      validation_(validation),
      training_samples_(training_samples),
      schedule_steps_(ScheduleDependsOnLength(config.lr_schedule) ? schedule_steps : -1),
      writer_(rank == 0) {}

bool CheckpointPolicy::DueAfter(int64_t global_step) const {
  return config_.checkpoint_every > 0 && global_step % config_.checkpoint_every == 0;
}

Result<TrainingPosition> CheckpointPolicy::Resume(Model& model, ParameterPlacement& placement,
                                                  OptimizerRunner& optimizer) {
  if (rank_ == 0 && !config_.checkpoint_dir.empty()) {
    DPL_RETURN_IF_ERROR(RemoveStagingFolders(config_.checkpoint_dir));
  }
  if (!config_.resume) return TrainingPosition{};
  if (config_.checkpoint_dir.empty()) {
    return Status::InvalidArgument("--resume needs --checkpoint-dir (the folder to resume from)");
  }
  DPL_ASSIGN_OR_RETURN(std::string newest, NewestCheckpoint(config_.checkpoint_dir));
  if (newest.empty()) {
    if (rank_ == 0) {
      log::Info("--resume: no checkpoint in " + config_.checkpoint_dir + ", starting fresh");
    }
    return TrainingPosition{};
  }
  Result<CheckpointState> read = ReadCheckpoint(newest);
  if (!read.ok()) {
    return Status::Error(read.status().code(),
                         read.status().message() + TheOneBefore(config_.checkpoint_dir, newest));
  }
  const CheckpointState state = std::move(read).value();
  DPL_RETURN_IF_ERROR(CheckResumedOptions(state, config_, newest));
  DPL_RETURN_IF_ERROR(CheckTrainingSamples(state, training_samples_, newest));
  if (rank_ == 0 && schedule_steps_ >= 0) {
    WarnOfARedrawnSchedule(state, config_, schedule_steps_, newest);
  }
  DPL_ASSIGN_OR_RETURN(const TrainingPosition position,
                       Apply(state, newest, model, placement, optimizer));
  if (rank_ == 0) {
    log::Info("resumed from " + newest + " at epoch " + std::to_string(position.epoch) +
              ", batch " + std::to_string(position.step_in_epoch) + " (step " +
              std::to_string(position.global_step) + ")");
  }
  return position;
}

Result<TrainingPosition> CheckpointPolicy::Apply(const CheckpointState& state,
                                                 const std::string& source, Model& model,
                                                 ParameterPlacement& placement,
                                                 OptimizerRunner& optimizer) {
  std::map<std::string, const TorchTensor*> tensors;
  for (const NamedTensor& entry : state.model) tensors[entry.name] = &entry.tensor;
  for (const HostParameter& p : placement.parameters()) {
    DPL_RETURN_IF_ERROR(Restore(tensors, p.name, TorchDtype::kFloat32, ShapeOf(p.model_value),
                                p.value, p.elements * sizeof(float), source));
  }
  DPL_RETURN_IF_ERROR(placement.ValuesChanged());
  DPL_RETURN_IF_ERROR(RestoreBuffers(tensors, model, source));
  DPL_RETURN_IF_ERROR(RestoreOptimizer(state, placement, optimizer, source));
  DPL_RETURN_IF_ERROR(RestoreLossScaling(state, optimizer, source));
  if (!state.rng_state.empty()) DPL_RETURN_IF_ERROR(model.SetRngState(state.rng_state));
  if (state.validation) {
    validation_ = ValidationState{state.validation->best_loss, state.validation->evaluations,
                                  state.validation->without_improvement};
  }
  const TrainingPosition position{state.epoch, state.step_in_epoch, state.global_step};
  saved_step_ = position.global_step;
  return position;
}

Result<CheckpointState> CheckpointPolicy::CaptureLive(const TrainingPosition& position,
                                                      Model& model, ParameterPlacement& placement,
                                                      OptimizerRunner& optimizer) const {
  DPL_RETURN_IF_ERROR(placement.RefreshHostValues());
  std::vector<size_t> sizes;
  for (const HostParameter& p : placement.parameters()) sizes.push_back(p.elements);
  OptimizerState whole;
  // Sharded, gathering the parts would take a collective: the parts travel apart (live_parts.hpp).
  if (!optimizer.sharded()) {
    DPL_RETURN_IF_ERROR(optimizer.WholeState(sizes, /*whole=*/true, &whole));
  }
  return Capture(position, model, placement, optimizer, whole);
}

Status CheckpointPolicy::Save(const TrainingPosition& position, Model& model,
                              ParameterPlacement& placement, OptimizerRunner& optimizer) {
  if (config_.checkpoint_dir.empty() || position.global_step == saved_step_) return Status::Ok();
  DPL_RETURN_IF_ERROR(
      writer_.WaitIdle(position.global_step)
          .WithContext("writing a checkpoint to --checkpoint-dir " + config_.checkpoint_dir));
  saved_step_ = position.global_step;
  return WritesParts(optimizer) ? SaveParts(position, model, placement, optimizer)
                                : SaveFile(position, model, placement, optimizer);
}

Status CheckpointPolicy::Finish() {
  return writer_.Finish().WithContext("writing a checkpoint to --checkpoint-dir " +
                                      config_.checkpoint_dir);
}

bool CheckpointPolicy::WritesParts(const OptimizerRunner& optimizer) const {
  return config_.shard_optimizer == OptimizerSharding::kOn && optimizer.sharded();
}

std::string CheckpointPolicy::PathOf(int64_t step, const OptimizerRunner& optimizer) const {
  return config_.checkpoint_dir + "/" +
         (WritesParts(optimizer) ? CheckpointFolderName(step) : CheckpointFileName(step));
}

Status CheckpointPolicy::SaveFile(const TrainingPosition& position, Model& model,
                                  ParameterPlacement& placement, OptimizerRunner& optimizer) {
  const Clock::time_point start = Clock::now();
  if (rank_ == 0) DPL_RETURN_IF_ERROR(placement.RefreshHostValues());
  // Every rank, for a sharded optimizer's parts; rank 0 gets the state whole.
  std::vector<size_t> sizes;
  for (const HostParameter& p : placement.parameters()) sizes.push_back(p.elements);
  OptimizerState whole;
  DPL_RETURN_IF_ERROR(optimizer.WholeState(sizes, rank_ == 0, &whole));
  if (rank_ != 0) return Status::Ok();
  DPL_ASSIGN_OR_RETURN(CheckpointState captured,
                       Capture(position, model, placement, optimizer, whole));
  auto state = std::make_shared<CheckpointState>(std::move(captured));
  const double pause = SecondsSince(start);
  const int64_t step = position.global_step;
  const std::string& directory = config_.checkpoint_dir;
  writer_.Start(step, [this, state, step, pause, directory](const std::atomic<bool>&) {
    const Clock::time_point began = Clock::now();
    DPL_RETURN_IF_ERROR(WriteCheckpoint(directory, std::move(*state)));
    AfterWritten(step, directory + "/" + CheckpointFileName(step), pause, SecondsSince(began));
    return Status::Ok();
  });
  return Status::Ok();
}

Status CheckpointPolicy::SaveParts(const TrainingPosition& position, Model& model,
                                   ParameterPlacement& placement, OptimizerRunner& optimizer) {
  const Clock::time_point start = Clock::now();
  auto state = std::make_shared<CheckpointState>();
  if (rank_ == 0) {
    DPL_RETURN_IF_ERROR(placement.RefreshHostValues());
    DPL_ASSIGN_OR_RETURN(*state, Capture(position, model, placement, optimizer, {}));
  }
  const int64_t step = position.global_step;
  auto part =
      std::make_shared<OptimizerPart>(CapturePart(step, rank_, world_size_, placement, optimizer));
  const double pause = SecondsSince(start);
  const std::string& directory = config_.checkpoint_dir;
  const int world_size = world_size_;
  const bool commits = rank_ == 0;
  writer_.Start(step, [this, state, part, step, pause, directory, world_size,
                       commits](const std::atomic<bool>& stop) {
    const Clock::time_point began = Clock::now();
    DPL_RETURN_IF_ERROR(WriteOptimizerPart(directory, std::move(*part)));
    if (!commits) return Status::Ok();
    DPL_RETURN_IF_ERROR(WriteFolderState(directory, std::move(*state)));
    DPL_RETURN_IF_ERROR(CommitCheckpointFolder(directory, step, world_size, stop));
    AfterWritten(step, directory + "/" + CheckpointFolderName(step), pause, SecondsSince(began));
    return Status::Ok();
  });
  return Status::Ok();
}

void CheckpointPolicy::AfterWritten(int64_t step, const std::string& path, double pause_seconds,
                                    double write_seconds) const {
  log::Info("checkpoint of step " + std::to_string(step) + ": " + path + " (written in " +
            log::Duration(write_seconds) + " while training went on, which paused " +
            log::Duration(pause_seconds) + " to copy it)");
  // Note [Checkpoint retention]: only now is the new one complete on disk.
  Result<std::vector<std::string>> removed =
      RemoveOlderCheckpoints(config_.checkpoint_dir, step, config_.keep_checkpoints);
  if (!removed.ok()) {
    log::Warning(removed.status().message() + "; --keep-checkpoints " +
                 std::to_string(config_.keep_checkpoints) +
                 " cannot keep the folder's size bounded until it can");
  }
}

std::vector<OptimizerStateTensor> OptimizerStateTensors(
    const std::vector<HostParameter>& parameters, const std::vector<std::string>& names,
    const OptimizerState& whole) {
  std::vector<OptimizerStateTensor> tensors;
  for (size_t k = 0; k < whole.size(); ++k) {
    for (size_t i = 0; i < parameters.size(); ++i) {
      const HostParameter& p = parameters[i];
      tensors.push_back(
          {p.name, names[k], FloatTensor(whole[k][i].data(), p.elements, ShapeOf(p.model_value))});
    }
  }
  return tensors;
}

Result<CheckpointState> CheckpointPolicy::Capture(const TrainingPosition& position, Model& model,
                                                  const ParameterPlacement& placement,
                                                  OptimizerRunner& optimizer,
                                                  const OptimizerState& whole) const {
  CheckpointState state;
  state.epoch = position.epoch;
  state.step_in_epoch = position.step_in_epoch;
  state.global_step = position.global_step;
  for (const ResumeSetting& setting : config_.resume_settings) {
    state.options.emplace_back(setting.flag, setting.value);
  }
  if (training_samples_ >= 0) {
    state.options.emplace_back(kTrainingSamplesKey, std::to_string(training_samples_));
  }
  if (schedule_steps_ >= 0) {
    state.options.emplace_back(kScheduleStepsKey, std::to_string(schedule_steps_));
  }
  for (const HostParameter& p : placement.parameters()) {
    state.model.push_back({p.name, FloatTensor(p.value, p.elements, ShapeOf(p.model_value))});
  }
  DPL_ASSIGN_OR_RETURN(std::vector<BufferInfo> buffers, ListBuffers(model));
  size_t total = 0;
  for (const BufferInfo& buffer : buffers) total += buffer.bytes;
  std::vector<uint8_t> bytes(total);
  if (total > 0) DPL_RETURN_IF_ERROR(model.ReadBuffers(bytes.data(), bytes.size()));
  size_t offset = 0;
  for (const BufferInfo& buffer : buffers) {
    DPL_ASSIGN_OR_RETURN(TorchDtype dtype,
                         TorchDtypeOfDl(buffer.value.dtype, "buffer " + buffer.name));
    TorchTensor tensor{
        dtype, buffer.shape,
        std::vector<uint8_t>(bytes.begin() + offset, bytes.begin() + offset + buffer.bytes)};
    state.model.push_back({buffer.name, std::move(tensor)});
    offset += buffer.bytes;
  }
  state.optimizer_name = NameOf(OptimizerNames(), config_.optimizer.kind);
  state.optimizer_steps = optimizer.optimizer_steps();
  state.optimizer_state =
      OptimizerStateTensors(placement.parameters(), optimizer.StateNames(), whole);
  if (model.Has(ModelCapability::kRngState)) DPL_RETURN_IF_ERROR(model.RngState(&state.rng_state));
  if (const std::optional<LossScalingState> scaling = optimizer.loss_scaling()) {
    state.scaler =
        ScalerCheckpoint{double(scaling->scaler.scale),       config_.loss_scaling.growth_factor,
                         config_.loss_scaling.backoff_factor, config_.loss_scaling.growth_interval,
                         scaling->scaler.growth_tracker,      scaling->skipped_steps};
  }
  state.validation = ValidationCheckpoint{validation_.best_loss, validation_.evaluations,
                                          validation_.without_improvement};
  return state;
}

}  // namespace dpl::training
