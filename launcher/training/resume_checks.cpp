#include "training/resume_checks.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include "common/log.hpp"
#include "training/lr_schedule.hpp"
#include "training/number_text.hpp"

namespace dpl::training {
namespace {

// The rate a schedule over `total_steps` gives at `step`, or none where it cannot.
std::optional<double> RateAt(const TrainingConfig& config, int64_t total_steps, int64_t step) {
  Result<LrSchedule> schedule =
      LrSchedule::Create(config.lr_schedule, config.optimizer.learning_rate, total_steps);
  if (!schedule.ok() || !schedule->Restore(step).ok()) return std::nullopt;
  return schedule->learning_rate();
}

}  // namespace

// An option a checkpoint does not name (written before the option existed) had its default.
Status CheckResumedOptions(const CheckpointState& state, const TrainingConfig& config,
                           const std::string& path) {
  std::map<std::string, std::string> saved(state.options.begin(), state.options.end());
  for (const ResumeSetting& setting : config.resume_settings) {
    const std::string& flag = setting.flag;
    const std::string& value = setting.value;
    auto found = saved.find(flag);
    const std::string& then = found != saved.end() ? found->second : setting.default_value;
    if (then != value) {
      return Status::InvalidArgument("checkpoint " + path + " was written with " + flag + " " +
                                     then + " but this run has " + flag + " " + value +
                                     "; resume with the same options or use another "
                                     "--checkpoint-dir");
    }
  }
  return Status::Ok();
}

// Note [The training set of a resumed run]: a checkpoint holds no data, and a resumed run may read
// it from another folder or prepare it otherwise; but its position (an epoch, a batch of it)
// counts samples of the training set it was written with. With a training set of another size
// (other data, another block= of tokens, another val_fraction=) that position means nothing (an
// epoch past its end, a sampler's order over other samples), so the resume is refused.
Status CheckTrainingSamples(const CheckpointState& state, int64_t samples,
                            const std::string& path) {
  if (samples < 0) return Status::Ok();
  for (const auto& [key, value] : state.options) {
    if (key != kTrainingSamplesKey || value == std::to_string(samples)) continue;
    return Status::InvalidArgument(
        "checkpoint " + path + " was written at epoch " + std::to_string(state.epoch) + ", batch " +
        std::to_string(state.step_in_epoch) + " of a training set of " + value +
        " samples, but this run's training set has " + std::to_string(samples) +
        ": that place means nothing in other data; resume with the training data it was written "
        "with (its folder may move), or start a fresh run in another --checkpoint-dir");
  }
  return Status::Ok();
}

// For a newest checkpoint that cannot be read (a disk that filled, a copy cut short): how to go
// on from the one before it, which the retention kept for this ("" when there is none).
std::string TheOneBefore(const std::string& folder, const std::string& newest) {
  Result<std::vector<CheckpointFile>> files = ListCheckpointFiles(folder);
  if (!files.ok()) return "";
  const auto unreadable =
      std::find_if(files->begin(), files->end(),
                   [&](const CheckpointFile& file) { return file.path == newest; });
  if (unreadable == files->end()) return "";
  const CheckpointFile* before = nullptr;
  for (const CheckpointFile& file : *files) {
    if (file.temporary || file.step >= unreadable->step) continue;
    if (before == nullptr || file.step > before->step) before = &file;
  }
  if (before == nullptr) return "";
  return "; to resume from the one before it, " + before->path + " (step " +
         std::to_string(before->step) + "), move " + newest + " out of " + folder;
}

// Note [A schedule drawn anew on resume]: a cosine or linear schedule draws its curve over the
// run's optimizer steps, which a resumed run may change (a larger --max-steps, more epochs): the
// rate then goes on from the new curve's value at the checkpoint's step, a jump from where the run
// left it. Training longer is a fair wish, so the jump is said with both rates, not refused.
bool ScheduleDependsOnLength(const LrScheduleOptions& options) {
  return options.kind == LrScheduleKind::kCosine || options.kind == LrScheduleKind::kLinear;
}

void WarnOfARedrawnSchedule(const CheckpointState& state, const TrainingConfig& config,
                            int64_t steps, const std::string& path) {
  for (const auto& [key, value] : state.options) {
    if (key != kScheduleStepsKey || value == std::to_string(steps)) continue;
    // strtoll, not stoll: a checkpoint's text that is no number gives no rate, not an exception.
    const int64_t then_steps = std::strtoll(value.c_str(), nullptr, 10);
    const std::optional<double> then = RateAt(config, then_steps, state.global_step);
    const std::optional<double> now = RateAt(config, steps, state.global_step);
    const std::string rates =
        then && now ? ": the learning rate of step " + std::to_string(state.global_step) + " is " +
                          NumberText(*now) + " where the run left it at " + NumberText(*then)
                    : "";
    log::Warning("checkpoint " + path + " was written under --lr-schedule " +
                 NameOf(LrScheduleNames(), config.lr_schedule.kind) + " over " + value +
                 " optimizer steps, and this run's schedule spans " + std::to_string(steps) +
                 rates +
                 " (the curve is drawn anew over the new length; keep --max-steps and "
                 "the data as they were to go on along the old one)");
  }
}

}  // namespace dpl::training
