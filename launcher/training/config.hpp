// The typed configuration of one training run: what the command line's training flags mean, with
// every number already checked and every choice an enum. The command line (cli/) builds it once;
// the training loop reads nothing else. A new training flag is one row of the flag table
// (cli/flags_training.cpp) and one field here.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dpl::training {

inline constexpr int kDefaultBatchSize = 128;                          // the recipe's global batch
inline constexpr int64_t kDefaultBucketCapBytes = 25LL * 1024 * 1024;  // as DDP
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr double kDefaultAdadeltaLearningRate = 0.5;  // the recipe's
inline constexpr double kDefaultLrGamma = 0.1;               // StepLR's default
// torch.optim.Adam's and AdamW's defaults.
inline constexpr double kDefaultAdamLearningRate = 1e-3;
inline constexpr double kDefaultAdamBeta1 = 0.9;
inline constexpr double kDefaultAdamBeta2 = 0.999;
inline constexpr double kDefaultAdamEps = 1e-8;
// Note [Checkpoint retention] in training/checkpoint_policy.hpp.
inline constexpr int kDefaultKeepCheckpoints = 5;
// A rank twice as slow as the median halves the job's speed; five steps in a row pass over the
// hiccups of a shared machine (Note [Stragglers]).
inline constexpr double kDefaultStragglerFactor = 2.0;
inline constexpr int kDefaultStragglerSteps = 5;
// torch.cuda.amp.GradScaler's defaults (torch 1.13).
inline constexpr double kDefaultLossScaleInit = 65536.0;  // 2^16
inline constexpr double kDefaultLossScaleGrowthFactor = 2.0;
inline constexpr double kDefaultLossScaleBackoffFactor = 0.5;
inline constexpr int64_t kDefaultLossScaleGrowthInterval = 2000;
inline constexpr int64_t kDefaultEvalBatches = 20;  // validation batches per evaluation

enum class Device { kCpu, kCuda };
enum class OptimizerKind { kAdadelta, kSgd, kAdam, kAdamW };
// The format gradients travel in between ranks (--grad-compression; kNone: float32). kAuto: the
// compute precision's 16-bit format (bf16 for --precision bf16, fp16 for fp16), none for fp32
// (training/precision.hpp).
enum class WireFormat { kNone, kFp16, kBf16, kAuto };
enum class Precision { kFp32, kBf16, kFp16 };
enum class LrScheduleKind { kConstant, kStep, kCosine, kLinear };
// How the workers of one machine sum their gradients on the CPU (local_reduce.hpp).
enum class LocalReduce { kSharedMemory, kBackend };
// Whether each rank keeps the optimizer state of its part only (update_share.hpp); kAuto: where it
// was measured faster (ShardsOptimizer in placement.hpp).
enum class OptimizerSharding { kAuto, kOn, kOff };
// Whether a sharded optimizer keeps a copy of each part on a second machine (Note [A copy of each
// part] in part_copy.hpp).
enum class ShardCopy { kAuto, kOn, kOff };

// A choice's spelling on the command line, in checkpoints and in messages: the one table per enum.
template <typename Enum>
using Spellings = std::vector<std::pair<const char*, Enum>>;

inline const Spellings<Device>& DeviceNames() {
  static const Spellings<Device> names = {{"cpu", Device::kCpu}, {"cuda", Device::kCuda}};
  return names;
}
inline const Spellings<OptimizerKind>& OptimizerNames() {
  static const Spellings<OptimizerKind> names = {{"adadelta", OptimizerKind::kAdadelta},
                                                 {"sgd", OptimizerKind::kSgd},
                                                 {"adam", OptimizerKind::kAdam},
                                                 {"adamw", OptimizerKind::kAdamW}};
  return names;
}
inline const Spellings<WireFormat>& WireFormatNames() {
  static const Spellings<WireFormat> names = {{"auto", WireFormat::kAuto},
                                              {"none", WireFormat::kNone},
                                              {"fp16", WireFormat::kFp16},
                                              {"bf16", WireFormat::kBf16}};
  return names;
}
inline const Spellings<Precision>& PrecisionNames() {
  static const Spellings<Precision> names = {
      {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}};
  return names;
}
inline const Spellings<LrScheduleKind>& LrScheduleNames() {
  static const Spellings<LrScheduleKind> names = {{"constant", LrScheduleKind::kConstant},
                                                  {"step", LrScheduleKind::kStep},
                                                  {"cosine", LrScheduleKind::kCosine},
                                                  {"linear", LrScheduleKind::kLinear}};
  return names;
}

inline const Spellings<LocalReduce>& LocalReduceNames() {
  static const Spellings<LocalReduce> names = {{"shm", LocalReduce::kSharedMemory},
                                               {"backend", LocalReduce::kBackend}};
  return names;
}
inline const Spellings<ShardCopy>& ShardCopyNames() {
  static const Spellings<ShardCopy> names = {
      {"auto", ShardCopy::kAuto}, {"on", ShardCopy::kOn}, {"off", ShardCopy::kOff}};
  return names;
}

inline const Spellings<OptimizerSharding>& OptimizerShardingNames() {
  static const Spellings<OptimizerSharding> names = {{"auto", OptimizerSharding::kAuto},
                                                     {"on", OptimizerSharding::kOn},
                                                     {"off", OptimizerSharding::kOff}};
  return names;
}

template <typename Enum>
const char* NameOf(const Spellings<Enum>& names, Enum value) {
  for (const auto& [name, entry] : names) {
    if (entry == value) return name;
  }
  return "?";
}

// One option a resumed run must share with the checkpoint it resumes from, as checkpoints record
// it ({"--lr", "0.5"}), and its value in a run that does not give it: what a checkpoint written
// before the option existed had.
struct ResumeSetting {
  std::string flag;
  std::string value;
  std::string default_value;
};

// The optimizer's hyperparameters, as torch.optim's (training/optimizer.hpp).
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdadelta;
  double learning_rate = kDefaultAdadeltaLearningRate;
  double momentum = 0.0;  // sgd
  double rho = 0.9;       // adadelta
  double eps = 1e-6;      // adadelta (adam and adamw use adam_eps)
  double adam_beta1 = kDefaultAdamBeta1;
  double adam_beta2 = kDefaultAdamBeta2;
  double adam_eps = kDefaultAdamEps;
  // As torch.optim's weight_decay: an L2 term in the gradients (sgd, adam, adadelta), decoupled
  // for adamw; on the tensors Note [Weight decay groups] (optimizer.hpp) says, every one with
  // decay_all.
  double weight_decay = 0.0;
  bool decay_all = false;
};

// The learning-rate schedule's (training/lr_schedule.hpp).
struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;        // W, optimizer steps
  int64_t step_size = 0;           // step: optimizer steps between decays; must be given (>= 1)
  double gamma = kDefaultLrGamma;  // step: the factor of each decay (> 0)
  // The run's steps are --max-steps (for the messages; from the step plan, not a flag).
  bool steps_from_max_steps = false;
};

// fp16's dynamic loss scaling, as torch.cuda.amp.GradScaler's (training/loss_scaler.hpp).
struct LossScalerOptions {
  double init_scale = kDefaultLossScaleInit;                  // > 0, finite as a float32
  double growth_factor = kDefaultLossScaleGrowthFactor;       // > 1
  double backoff_factor = kDefaultLossScaleBackoffFactor;     // in (0, 1)
  int64_t growth_interval = kDefaultLossScaleGrowthInterval;  // clean steps per growth, >= 1
};

// Note [Stragglers] (training/stragglers.hpp): rank 0 names a rank whose compute time per step
// exceeds `factor` times the median rank's for `steps` steps in a row.
struct StragglerOptions {
  double factor = kDefaultStragglerFactor;  // 0: the ranks' times are not compared
  int steps = kDefaultStragglerSteps;
};

struct TrainingConfig {
  // The model plugin and its own options.
  std::string model = "convnet";
  std::string model_options;

  // Data: the dataset plugin named by data_format reads data_dir with its data_options, and may
  // keep derived copies in data_cache_dir ("" = none).
  std::string data_format = "idx";
  std::string data_dir = kDefaultDataDir;
  std::string data_options;
  std::string data_cache_dir;

  // The schedule of the run.
  int epochs = 1;
  int batch_size = kDefaultBatchSize;  // GLOBAL batch, split evenly across ranks
  int64_t max_steps = 0;               // stop after this many optimizer steps; 0 = no limit
  uint64_t seed = 0;                   // initialisation, shuffling and dropout
  bool drop_last = false;
  bool evaluate = true;  // the test-set evaluation at the end
  // Validation while training (training/evaluation.hpp): every eval_every optimizer steps (0 =
  // never) on eval_batches global batches of the validation split (0 = all of it); the run ends
  // after early_stop_patience evaluations in a row without a lower loss (0 = never).
  int64_t eval_every = 0;
  int64_t eval_batches = kDefaultEvalBatches;
  int64_t early_stop_patience = 0;

  // Where the model computes; mirror_parameters runs a CPU model through the host copy of the
  // parameters, as a CUDA model always does (Note [Host copy of the parameters]).
  Device device = Device::kCpu;
  bool mirror_parameters = false;

  // The arithmetic of the forward pass (autocast); parameters and optimizer stay float32.
  Precision precision = Precision::kFp32;

  // The optimizer step.
  OptimizerOptions optimizer;
  int grad_accum = 1;           // micro-batches per optimizer step
  double clip_grad_norm = 0.0;  // max global L2 norm of the averaged gradients; 0 = no clipping

  // The learning-rate schedule over the run's optimizer steps (training/lr_schedule.hpp).
  LrScheduleOptions lr_schedule;

  // fp16's dynamic loss scaling (training/loss_scaler.hpp).
  LossScalerOptions loss_scaling;

  // Gradient averaging: the wire format (--grad-compression; kAuto: the precision's) and the
  // bucket size.
  WireFormat grad_compression = WireFormat::kAuto;
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  // A machine's workers sum through its shared memory or through the backend; the optimizer state
  // may be split among the ranks (ZeRO stage 1, update_share.hpp).
  LocalReduce local_reduce = LocalReduce::kSharedMemory;
  OptimizerSharding shard_optimizer = OptimizerSharding::kAuto;
  ShardCopy shard_copy = ShardCopy::kAuto;
  // A device model's optimizer runs on a host copy of its parameters even where the model could
  // run it on its device (Note [Device optimizer placement]).
  bool offload_optimizer = false;

  // Reporting: rank 0 logs every log_interval batches, writes JSON lines to metrics_file and
  // TensorBoard events into tensorboard_dir ("" = none), and sends progress records to the
  // launcher unless !progress. With trace_file, every rank records its timeline for it.
  int log_interval = 10;
  std::string metrics_file;
  std::string tensorboard_dir;
  std::string trace_file;
  bool progress = true;
  // Note [Stragglers] (training/stragglers.hpp).
  StragglerOptions stragglers;

  // Checkpoints: written every checkpoint_every steps (0 = only at the end; by rank 0, or by every
  // rank its part: Note [Checkpoint forms]); the newest keep_checkpoints stay (0 = all; Note
  // [Checkpoint retention]).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = kDefaultKeepCheckpoints;
  bool resume = false;
  // What a checkpoint records and a resumed run must match: the flag table's list
  // (cli::ResumeSettings, filled in by the command line).
  std::vector<ResumeSetting> resume_settings;

  // Every check_replicas optimizer steps the ranks compare a hash of their parameters (0 = never;
  // training/replica_check.hpp).
  int64_t check_replicas = 0;

  // Each rank writes its final parameters to dump_parameters_dir/rank-N.bin and its buffers to
  // rank-N.buffers.bin ("" = not).
  std::string dump_parameters_dir;

  // The trained model for Python, written by rank 0 at the end ("" = not): the model's own
  // export (a TorchScript module, or a state dict of the module's names).
  std::string export_file;
  // The model of the lowest validation loss so far, written as export_file is ("" = not).
  std::string export_best_file;
  // A state dict (torch.save of {name: tensor}) to start from ("" = the model's initialisation).
  std::string init_from;
};

}  // namespace dpl::training
