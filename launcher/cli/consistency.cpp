// Checks that involve more than one flag (ParseCommandLine's last step): how the batch splits,
// which flags need others, a job's shape against its store, a worker's own flags.
#include "cli/consistency.hpp"

#include <string>

#include "cli/flag_kinds.hpp"
#include "cli/flags.hpp"

namespace dpl::cli {
namespace {

// The global batch splits evenly over every world size the job may run with (each number of
// machines of an elastic job: it keeps the global batch when machines come and go).
Status CheckBatchSplits(const Options& options) {
  const int batch = options.training.batch_size;
  for (int machines = options.min_machines; machines <= options.num_machines; ++machines) {
    const int world_size = options.num_processes * machines;
    if (batch % world_size == 0) continue;
    if (!options.elastic()) {
      return Status::InvalidArgument("--batch-size " + std::to_string(batch) +
                                     " is not divisible by the world size " +
                                     std::to_string(world_size) + " (--num-processes " +
                                     std::to_string(options.num_processes) + " x --num-machines " +
                                     std::to_string(options.num_machines) +
                                     "); the global batch is split evenly across workers");
    }
    return Status::InvalidArgument(
        "--batch-size " + std::to_string(batch) + " is not divisible by the world size " +
        std::to_string(world_size) + " of " + std::to_string(machines) +
        " machines (--num-processes " + std::to_string(options.num_processes) + " x " +
        std::to_string(machines) + " of --num-machines " + std::to_string(options.min_machines) +
        ":" + std::to_string(options.num_machines) +
        "); an elastic job keeps its global batch, which must split evenly over every number of "
        "machines it may run with");
  }
  return Status::Ok();
}

// --early-stop-patience and --export-best act on validation while training.
Status CheckValidationFlags(const training::TrainingConfig& training) {
  if (training.eval_every > 0) return Status::Ok();
  if (training.early_stop_patience > 0) {
    return Status::InvalidArgument(
        "--early-stop-patience counts evaluations of the validation split: give --eval-every N");
  }
  if (!training.export_best_file.empty()) {
    return Status::InvalidArgument(
        "--export-best keeps the model of the lowest validation loss: give --eval-every N");
  }
  return Status::Ok();
}

// A worker's own flags, which its launcher gives.
Status CheckWorkerFlags(const Options& options) {
  if (options.machine_id == kAutoMachineId) {
    return Status::InvalidArgument("--worker needs its machine's --machine-id");
  }
  if (options.local_rank < 0 && options.worker_output_fds.empty()) {
    return Status::InvalidArgument("--worker needs --local-rank or --worker-outputs");
  }
  if (options.local_rank >= 0 && !options.worker_output_fds.empty()) {
    return Status::InvalidArgument("--worker takes --local-rank or --worker-outputs, not both");
  }
  if (!options.worker_output_fds.empty() &&
      static_cast<int>(options.worker_output_fds.size()) != options.num_processes) {
    return Status::InvalidArgument(
        "--worker-outputs lists " + std::to_string(options.worker_output_fds.size()) +
        " descriptors for --num-processes " + std::to_string(options.num_processes));
  }
  if (options.store_addr.empty()) {
    return Status::InvalidArgument("--worker needs --store-addr host:port");
  }
  return Status::Ok();
}

}  // namespace

// Checks that involve more than one flag.
Status CheckConsistency(const Options& options) {
  DPL_RETURN_IF_ERROR(options.runs_program() ? table::CheckProgramJob(options)
                                             : CheckBatchSplits(options));
  DPL_RETURN_IF_ERROR(CheckValidationFlags(options.training));
  DPL_RETURN_IF_ERROR(table::CheckLogRanks(options));
  if (options.training.lr_schedule.kind == training::LrScheduleKind::kStep &&
      options.training.lr_schedule.step_size == 0) {
    return Status::InvalidArgument(
        "--lr-schedule step needs --lr-step-size N, the optimizer steps between decays by "
        "--lr-gamma (StepLR's step_size)");
  }
  if (options.training.optimizer.decay_all &&
      options.training.optimizer.kind != training::OptimizerKind::kAdamW) {
    return Status::InvalidArgument(
        std::string("--decay-all applies to --optimizer adamw, whose weight decay skips biases "
                    "and norm weights; ") +
        training::NameOf(training::OptimizerNames(), options.training.optimizer.kind) +
        " decays every tensor already");
  }
  if (!options.hostfile.empty() && options.elastic()) {
    return Status::InvalidArgument(
        "--hostfile starts one launcher on each of its hosts: give --num-machines as one number "
        "(or leave it out), not the range " +
        std::to_string(options.min_machines) + ":" + std::to_string(options.num_machines));
  }
  if (options.elastic() && !options.selftest_job && !options.runs_program() &&
      options.training.checkpoint_dir.empty() && options.command != Command::kWorker) {
    return Status::InvalidArgument(
        "--num-machines " + std::to_string(options.min_machines) + ":" +
        std::to_string(options.num_machines) +
        " is an elastic job, which falls back on its newest checkpoint when its workers cannot "
        "regroup in place: give --checkpoint-dir (and --checkpoint-every N)");
  }
  // A launcher's own --resume (a restart gives its workers one of its own, with or without a
  // folder: a selftest has none).
  if (options.command == Command::kTrain && options.training.resume &&
      options.training.checkpoint_dir.empty() && !options.runs_program()) {
    return Status::InvalidArgument("--resume needs --checkpoint-dir (the folder to resume from)");
  }
  if (options.command != Command::kWorker && options.machine_id > 0 && options.master_port == 0 &&
      options.store.empty() && options.hostfile.empty()) {
    return Status::InvalidArgument(
        "--machine-id " + std::to_string(options.machine_id) +
        " with --master-port 0: port 0 lets machine 0 pick a free port, which no other machine "
        "can know; give every launcher the port machine 0 listens on (its log says it)");
  }
  return options.command == Command::kWorker ? CheckWorkerFlags(options) : Status::Ok();
}

std::vector<std::string> FlagsWithoutEffect(const Options& options) {
  const training::TrainingConfig& training = options.training;
  const training::OptimizerKind kind = training.optimizer.kind;
  const bool adam =
      kind == training::OptimizerKind::kAdam || kind == training::OptimizerKind::kAdamW;
  const std::string optimizer =
      std::string("with --optimizer ") + training::NameOf(training::OptimizerNames(), kind);
  const std::pair<bool, std::string> rules[] = {
      {options.Given("momentum") && kind != training::OptimizerKind::kSgd,
       "--momentum has no effect " + optimizer + ": only sgd uses it"},
      {options.Given("betas") && !adam,
       "--betas has no effect " + optimizer + ": adam and adamw use it"},
      {options.Given("eps") && !adam,
       "--eps has no effect " + optimizer + ": adam and adamw use it (adadelta keeps 1e-06)"},
      {(options.Given("lr-step-size") || options.Given("lr-gamma")) &&
           training.lr_schedule.kind != training::LrScheduleKind::kStep,
       "--lr-step-size and --lr-gamma have no effect without --lr-schedule step"},
      {options.Given("loss-scale-init") && training.precision != training::Precision::kFp16,
       "--loss-scale-init has no effect without --precision fp16"},
      {(options.Given("checkpoint-every") || options.Given("keep-checkpoints")) &&
           training.checkpoint_dir.empty(),
       "--checkpoint-every and --keep-checkpoints have no effect without --checkpoint-dir: this "
       "run writes no checkpoints"},
      {options.Given("eval-batches") && training.eval_every == 0,
       "--eval-batches has no effect without --eval-every"},
  };
  std::vector<std::string> ignored;
  for (const auto& [applies, why] : rules) {
    if (applies) ignored.push_back(why);
  }
  // An empty value takes a file back (one a config file named), and is what an unset shell
  // variable gives: `--checkpoint-dir "$CKPT"`.
  const std::pair<const char*, const std::string*> files[] = {
      {"checkpoint-dir", &training.checkpoint_dir}, {"export", &training.export_file},
      {"export-best", &training.export_best_file},  {"metrics", &training.metrics_file},
      {"tensorboard", &training.tensorboard_dir},   {"trace", &training.trace_file},
      {"init-from", &training.init_from},           {"log-dir", &options.log_dir}};
  for (const auto& [flag, value] : files) {
    if (options.Given(flag) && value->empty()) {
      ignored.push_back("--" + std::string(flag) +
                        " is empty, so it names nothing: this run goes "
                        "without it");
    }
  }
  if (options.runs_program()) {
    for (const char* flag : {"model", "data", "export", "checkpoint-dir", "init-from", "epochs",
                             "max-steps", "lr", "optimizer"}) {
      if (options.Given(flag)) {
        ignored.push_back("--" + std::string(flag) +
                          " has no effect on a program (after --), which trains as it is written");
      }
    }
  }
  return ignored;
}

}  // namespace dpl::cli
