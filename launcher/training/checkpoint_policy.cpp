#include "training/checkpoint_policy.hpp"

#include <cstring>
#include <sstream>

#include "common/log.hpp"
#include "training/checkpoint.hpp"

namespace dpl::training {

CheckpointPolicy::CheckpointPolicy(const TrainingConfig& config, int rank, int world_size)
    : config_(config), rank_(rank), world_size_(world_size) {}

// No world size: the global batch is what the math depends on (DistributedSampler's global
// batch k is the same samples at any world size), and an elastic job resumes with fewer or more
// machines than wrote the checkpoint.
std::string CheckpointPolicy::Fingerprint() const {
  std::ostringstream s;
  s << "model=" << config_.model << ";model_options=" << config_.model_options
    << ";optimizer=" << NameOf(OptimizerNames(), config_.optimizer)
    << ";lr=" << config_.learning_rate << ";momentum=" << config_.momentum
    << ";batch_size=" << config_.batch_size << ";seed=" << config_.seed
    << ";grad_accum=" << config_.grad_accum << ";drop_last=" << (config_.drop_last ? 1 : 0);
  return s.str();
}

bool CheckpointPolicy::DueAfter(int64_t global_step) const {
  return config_.checkpoint_every > 0 && global_step % config_.checkpoint_every == 0;
}

Result<TrainingPosition> CheckpointPolicy::Resume(ParameterPlacement& placement,
                                                  Optimizer& optimizer) const {
  if (!config_.resume) return TrainingPosition{};
  if (config_.checkpoint_dir.empty()) {
    return Status::InvalidArgument("--resume needs --checkpoint-dir (the folder to resume from)");
  }
  Result<std::string> newest = NewestCheckpoint(config_.checkpoint_dir);
  if (!newest.ok()) return newest.status();
  if (newest->empty()) {
    if (rank_ == 0) {
      log::Info("--resume: no checkpoint in " + config_.checkpoint_dir + ", starting fresh");
    }
    return TrainingPosition{};
  }
  Result<CheckpointState> state = ReadCheckpoint(*newest);
  if (!state.ok()) return state.status();
  const std::string expected = Fingerprint();
  if (state->fingerprint != expected) {
    return Status::InvalidArgument(
        "checkpoint " + *newest + " was written with options '" + state->fingerprint +
        "' but this run has '" + expected +
        "'; resume with the same options or use another --checkpoint-dir");
  }
  const std::vector<HostParameter>& parameters = placement.parameters();
  std::vector<std::vector<float>*> buffers = optimizer.StateBuffers();
  bool shapes_match = state->parameters.size() == parameters.size() &&
                      state->optimizer_state.size() == buffers.size();
  for (size_t i = 0; shapes_match && i < parameters.size(); ++i) {
    shapes_match = state->parameters[i].size() == parameters[i].elements;
  }
  for (size_t i = 0; shapes_match && i < buffers.size(); ++i) {
    shapes_match = state->optimizer_state[i].size() == buffers[i]->size();
  }
  if (!shapes_match) {
    return Status::InvalidArgument(
        "checkpoint " + *newest +
        " holds parameters or optimizer state of other shapes than this model");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::memcpy(parameters[i].value, state->parameters[i].data(),
                parameters[i].elements * sizeof(float));
  }
  DPL_RETURN_IF_ERROR(placement.ValuesChanged());
  for (size_t i = 0; i < buffers.size(); ++i) *buffers[i] = state->optimizer_state[i];
  optimizer.set_steps(state->optimizer_steps);
  const TrainingPosition position{state->epoch, state->step_in_epoch, state->global_step};
  if (rank_ == 0) {
    log::Info("resumed from " + *newest + " at epoch " + std::to_string(position.epoch) +
              ", batch " + std::to_string(position.step_in_epoch) + " (step " +
              std::to_string(position.global_step) + ")");
  }
  return position;
}

Status CheckpointPolicy::Save(const TrainingPosition& position, const ParameterPlacement& placement,
                              Optimizer& optimizer) const {
  if (config_.checkpoint_dir.empty() || rank_ != 0) return Status::Ok();
  CheckpointState state;
  state.global_step = position.global_step;
  state.epoch = position.epoch;
  state.step_in_epoch = position.step_in_epoch;
  state.optimizer_steps = optimizer.steps();
  state.fingerprint = Fingerprint();
  for (const HostParameter& p : placement.parameters()) {
    state.parameters.emplace_back(p.value, p.value + p.elements);
  }
  for (const std::vector<float>* b : optimizer.StateBuffers()) state.optimizer_state.push_back(*b);
  return WriteCheckpoint(config_.checkpoint_dir, state)
      .WithContext("writing a checkpoint to --checkpoint-dir " + config_.checkpoint_dir);
}

}  // namespace dpl::training
