// The typed configuration of one training run: what the command line's training flags mean, with
// every number already checked and every choice an enum. The command line (cli/) builds it once;
// the training loop reads nothing else. A new training flag is one entry of cli/flags.cpp and one
// field here.
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

enum class Device { kCpu, kCuda };
enum class OptimizerKind { kAdadelta, kSgd, kAdam };
enum class GradientCompression { kNone, kFp16, kBf16 };

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
                                                 {"adam", OptimizerKind::kAdam}};
  return names;
}
inline const Spellings<GradientCompression>& CompressionNames() {
  static const Spellings<GradientCompression> names = {{"none", GradientCompression::kNone},
                                                       {"fp16", GradientCompression::kFp16},
                                                       {"bf16", GradientCompression::kBf16}};
  return names;
}

template <typename Enum>
const char* NameOf(const Spellings<Enum>& names, Enum value) {
  for (const auto& [name, entry] : names) {
    if (entry == value) return name;
  }
  return "?";
}

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

  // Where the model computes; mirror_parameters runs a CPU model through the host copy of the
  // parameters, as a CUDA model always does (Note [Host copy of the parameters]).
  Device device = Device::kCpu;
  bool mirror_parameters = false;

  // The optimizer step.
  OptimizerKind optimizer = OptimizerKind::kAdadelta;
  double learning_rate = kDefaultAdadeltaLearningRate;
  double momentum = 0.0;  // sgd
  int grad_accum = 1;     // micro-batches per optimizer step

  // Gradient averaging.
  GradientCompression grad_compression = GradientCompression::kNone;
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;

  // Reporting: rank 0 logs every log_interval batches, writes JSON lines to metrics_file and
  // TensorBoard events into tensorboard_dir ("" = none), and sends progress records to the
  // launcher unless !progress. With trace_file, every rank records its timeline for it.
  int log_interval = 10;
  std::string metrics_file;
  std::string tensorboard_dir;
  std::string trace_file;
  bool progress = true;

  // Checkpoints: written by rank 0 every checkpoint_every steps (0 = only at the end).
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;

  // Each rank writes its final parameters to dump_parameters_dir/rank-N.bin and its buffers to
  // rank-N.buffers.bin ("" = not).
  std::string dump_parameters_dir;

  // The trained model for Python, written by rank 0 at the end ("" = not): the model's own
  // export (a TorchScript module, or a state dict of the module's names).
  std::string export_file;
  // A state dict (torch.save of {name: tensor}) to start from ("" = the model's initialisation).
  std::string init_from;
};

}  // namespace dpl::training
