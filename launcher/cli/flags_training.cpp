// The flag table's rows for what is trained and how (flags.hpp).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "cli/flag_kinds.hpp"

namespace dpl::cli::table {
namespace {

using training::LossScalerOptions;
using training::LrScheduleOptions;
using training::OptimizerOptions;

constexpr int kMaxEpochs = 1000000;
constexpr int kMaxBatchSize = 1 << 20;
constexpr int kMaxGradAccum = 1024;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr double kMaxBucketCapMb = 4096.0;
constexpr double kBytesPerMib = 1024.0 * 1024.0;
constexpr double kFloat32Max = double(std::numeric_limits<float>::max());

// --data-cache's default follows the XDG base directory rules, else no cache.
std::optional<std::pair<std::string, std::string>> DefaultDataCache() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string folder;
  if (cache && *cache == '/') {
    folder = std::string(cache) + "/dpl/data";
  } else if (home && *home == '/') {
    folder = std::string(home) + "/.cache/dpl/data";
  } else {
    return std::nullopt;
  }
  return std::make_pair(std::string("the data cache folder"), folder);
}

// --shard-optimizer [auto|on|off]: alone it means on, as when it was a switch, and a config
// file's true or false still reads.
Flag ShardOptimizer() {
  Flag flag = Choice("shard-optimizer", "[WHEN]", training::OptimizerShardingNames,
                     In<&TrainingConfig::shard_optimizer>);
  flag.optional_value = true;
  const auto choose = flag.apply;
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    bool given = true;
    if (text.empty() || ParseBool(label, text, &given).ok()) {
      In<&TrainingConfig::shard_optimizer>(parsed->options) =
          given ? training::OptimizerSharding::kOn : training::OptimizerSharding::kOff;
      return Status::Ok();
    }
    return choose(label, text, parsed);
  };
  return flag;
}

Flag DataCache() {
  Flag data_cache = Base("data-cache", "DIR");
  data_cache.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    std::string& folder = parsed->options.training.data_cache_dir;
    DPL_RETURN_IF_ERROR(ParseNonEmpty(label, text, &folder));
    if (folder == "none") folder.clear();
    return Status::Ok();
  };
  data_cache.environment = DefaultDataCache;
  data_cache.forward = [](const Options& o) {
    const std::string& folder = o.training.data_cache_dir;
    return Args("data-cache", folder.empty() ? "none" : folder);
  };
  return data_cache;
}

// 0 stands for "not given", which workers are not told.
Flag LrStepSize() {
  Flag step_size =
      Integer<int64_t>("lr-step-size", "N", 1, Constant<kInt64Max>,
                       In<&TrainingConfig::lr_schedule, &LrScheduleOptions::step_size>);
  step_size.forward = [](const Options& o) {
    const int64_t steps = o.training.lr_schedule.step_size;
    return steps == 0 ? std::vector<std::string>{} : Args("lr-step-size", std::to_string(steps));
  };
  return step_size;
}

Flag BucketCap() {
  Flag bucket = Base("bucket-cap-mb", "MIB");
  bucket.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    double megabytes = 0;
    DPL_RETURN_IF_ERROR(ParseReal(
        label, text, "greater than 0 and at most 4096",
        [](double x) { return x > 0 && x <= kMaxBucketCapMb; }, &megabytes));
    parsed->options.training.bucket_cap_bytes =
        std::max<int64_t>(1, static_cast<int64_t>(std::llround(megabytes * kBytesPerMib)));
    return Status::Ok();
  };
  bucket.forward = [](const Options& o) {
    return Args("bucket-cap-mb",
                ExactText(static_cast<double>(o.training.bucket_cap_bytes) / kBytesPerMib));
  };
  return bucket;
}

bool Positive(double x) {
  return x > 0;
}
bool NotNegative(double x) {
  return x >= 0;
}
bool Coefficient(double x) {
  return x >= 0 && x < 1;
}

// --betas B1,B2: Adam's and AdamW's coefficients of the running averages, each in [0, 1).
Flag Betas() {
  Flag betas = Base("betas", "B1,B2");
  betas.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    const auto comma = text.find(',');
    double first = 0, second = 0;
    const bool read = comma != std::string::npos &&
                      ParseReal(label, text.substr(0, comma), "", Coefficient, &first).ok() &&
                      ParseReal(label, text.substr(comma + 1), "", Coefficient, &second).ok();
    if (!read) {
      return Status::InvalidArgument(label +
                                     " must be two numbers B1,B2, each at least 0 and less than 1 "
                                     "(got '" +
                                     text + "')");
    }
    parsed->options.training.optimizer.adam_beta1 = first;
    parsed->options.training.optimizer.adam_beta2 = second;
    return Status::Ok();
  };
  betas.recorded_value = [](const Options& o) {
    return RecordedNumber(o.training.optimizer.adam_beta1) + "," +
           RecordedNumber(o.training.optimizer.adam_beta2);
  };
  betas.forward = [](const Options& o) {
    return Args("betas", ExactText(o.training.optimizer.adam_beta1) + "," +
                             ExactText(o.training.optimizer.adam_beta2));
  };
  return betas;
}

// The schedule of the run and its data.
void AddScheduleAndDataFlags(TableRows add) {
  add(Section::kTraining, SameOnEveryMachine("a resumed run may train for more epochs"),
      Integer<int>("epochs", "N", 1, Constant<kMaxEpochs>, In<&TrainingConfig::epochs>),
      "passes over the training set, 1..1000000 (default 1)");
  add(Section::kTraining, ChangesTheMath(),
      Integer<int>("batch-size", "N", 1, Constant<kMaxBatchSize>, In<&TrainingConfig::batch_size>),
      "GLOBAL batch size, divisible by the world size (default 128)");
  add(Section::kData,
      SameOnEveryMachine("a checkpoint holds no data, only its training set's size, which a "
                         "resumed run's must have"),
      Text("data", "FORMAT", EmptyText::kRefused, In<&TrainingConfig::data_format>),
      "data set plugin: idx|npy|cifar10|imagefolder|webdataset|text|tokens|<plugin name> "
      "(default idx)");
  add(Section::kData, SameOnEveryMachine("a checkpoint holds no data; the folder may have moved"),
      Text("data-dir", "DIR", EmptyText::kRefused, In<&TrainingConfig::data_dir>),
      "folder holding the data (default /usr/share/datasets/fashion-mnist, for idx)");
  add(Section::kData,
      SameOnEveryMachine("a checkpoint holds no data; a resumed run may prepare it otherwise"),
      Text("data-options", "K=V,..", EmptyText::kAllowed, In<&TrainingConfig::data_options>),
      "data-set-specific options \"key=value,key=value\" (mean=, std=, crop=, flip=, ...)");
  add(Section::kData, MayDiffer("this machine's folder for copies of the data"), DataCache(),
      "folder for inflated copies of .gz data, or none (default $XDG_CACHE_HOME/dpl/data or "
      "~/.cache/dpl/data)");
  add(Section::kTraining,
      SameOnEveryMachine("a resumed run may stop later: that is how a run is extended (a "
                         "schedule then spans the new length)"),
      Integer<int64_t>("max-steps", "N", 0, Constant<kInt64Max>, In<&TrainingConfig::max_steps>),
      "stop after this many optimizer steps, 0 = no limit (default 0)");
  add(Section::kTraining, ChangesTheMath(), Unsigned64("seed", "N", In<&TrainingConfig::seed>),
      "seed of initialisation, shuffling and dropout (default 0)");
  add(Section::kTraining,
      SameOnEveryMachine("a checkpoint holds host values, which any device takes"),
      Choice<training::Device>("device", "DEVICE", training::DeviceNames,
                               In<&TrainingConfig::device>),
      "cpu|cuda (default cpu)");
}

// The optimizer step.
void AddOptimizerFlags(TableRows add) {
  add(Section::kOptimizer, ChangesTheMath(),
      Choice<training::OptimizerKind>("optimizer", "NAME", training::OptimizerNames,
                                      In<&TrainingConfig::optimizer, &OptimizerOptions::kind>),
      "adadelta|sgd|adam|adamw (default adadelta), torch.optim's arithmetic; adamw's weight "
      "decay is decoupled (AdamW)");
  add(Section::kOptimizer, ChangesTheMath(),
      Real("lr", "RATE", "greater than 0", Positive,
           In<&TrainingConfig::optimizer, &OptimizerOptions::learning_rate>),
      "learning rate, > 0 (default 0.5; 0.001 for adam and adamw, as torch.optim's)");
  add(Section::kOptimizer, ChangesTheMath(),
      Real(
          "momentum", "M", "at least 0 and less than 1", [](double x) { return x >= 0 && x < 1; },
          In<&TrainingConfig::optimizer, &OptimizerOptions::momentum>),
      "SGD momentum, 0 <= m < 1 (default 0)");
  add(Section::kTraining, ChangesTheMath(),
      Integer<int>("grad-accum", "K", 1, Constant<kMaxGradAccum>, In<&TrainingConfig::grad_accum>),
      "micro-batches per optimizer step, 1..1024 (default 1); each micro-batch is --batch-size "
      "samples, so a step takes K x --batch-size");
  add(Section::kPrecision,
      SameOnEveryMachine("the gradients' format on the wire; a checkpoint holds float32 state"),
      Choice<training::WireFormat>("grad-compression", "KIND", training::WireFormatNames,
                                   In<&TrainingConfig::grad_compression>),
      "format of the gradients on the wire: auto|none|fp16|bf16 (default auto: the --precision's "
      "between machines, so bf16 and fp16 training send 16-bit buckets and fp32 float32 ones, and "
      "float32 on one machine); an explicit value wins; the backend sums 16-bit buckets in "
      "float32");
  add(Section::kPrecision, ChangesTheMath(),
      Choice<training::Precision>("precision", "FORMAT", training::PrecisionNames,
                                  In<&TrainingConfig::precision>),
      "arithmetic of the forward pass: fp32|bf16|fp16 (default fp32); bf16 and fp16 autocast "
      "convolutions and matrix products to 16 bits, with the loss, the master parameters and the "
      "optimizer in float32; fp16 scales the loss dynamically (--loss-scale-*) and skips a step "
      "whose gradients overflow");
  add(Section::kOptimizer, ChangesTheMath(),
      Real("weight-decay", "L2", "at least 0", NotNegative,
           In<&TrainingConfig::optimizer, &OptimizerOptions::weight_decay>),
      "torch.optim's weight_decay, >= 0 (default 0): sgd, adam and adadelta add it to the "
      "gradients of every tensor (L2); adamw decays the parameters themselves, those of two or "
      "more dimensions only, never biases or norm weights, as nanoGPT's param groups "
      "(--decay-all: every tensor); the log says which");
  add(Section::kOptimizer, ChangesTheMath(),
      Switch("decay-all", SwitchSets::kTrue,
             In<&TrainingConfig::optimizer, &OptimizerOptions::decay_all>),
      "--optimizer adamw: decay every tensor, biases and norm weights too (torch's default for "
      "one param group)");
  add(Section::kOptimizer, ChangesTheMath(), Betas(),
      "adam and adamw: the running averages' coefficients, each >= 0 and < 1 (default 0.9,0.999)");
  add(Section::kOptimizer, ChangesTheMath(),
      Real("eps", "EPS", "greater than 0", Positive,
           In<&TrainingConfig::optimizer, &OptimizerOptions::adam_eps>),
      "adam and adamw: the term added to the denominator, > 0 (default 1e-08; adadelta keeps "
      "torch's 1e-06)");
}

// Clipping and the learning rate's schedule.
void AddClippingAndScheduleFlags(TableRows add) {
  add(Section::kOptimizer, ChangesTheMath(),
      Real("clip-grad-norm", "MAX", "at least 0", NotNegative, In<&TrainingConfig::clip_grad_norm>),
      "scale the averaged gradients down to this global L2 norm when above it (clip_grad_norm_), "
      "0 = off (default 0)");
  add(Section::kOptimizer, ChangesTheMath(),
      Choice<training::LrScheduleKind>("lr-schedule", "NAME", training::LrScheduleNames,
                                       In<&TrainingConfig::lr_schedule, &LrScheduleOptions::kind>),
      "learning rate over the optimizer steps the run takes (--max-steps when it ends the run "
      "first, else those of --epochs), as torch.optim.lr_scheduler: constant|step (StepLR)|"
      "cosine (CosineAnnealingLR to 0)|linear (LinearLR to 0) (default constant)");
  add(Section::kOptimizer, ChangesTheMath(),
      Integer<int64_t>("warmup-steps", "N", 0, Constant<kInt64Max>,
                       In<&TrainingConfig::lr_schedule, &LrScheduleOptions::warmup_steps>),
      "optimizer steps ramping the learning rate linearly up to --lr before the schedule starts, "
      ">= 0 (default 0)");
  add(Section::kOptimizer, ChangesTheMath(), LrStepSize(),
      "--lr-schedule step: optimizer steps between decays by --lr-gamma, >= 1 (needed by step)");
  add(Section::kOptimizer, ChangesTheMath(),
      Real("lr-gamma", "G", "greater than 0", Positive,
           In<&TrainingConfig::lr_schedule, &LrScheduleOptions::gamma>),
      "--lr-schedule step: the factor of each decay, > 0 (default 0.1)");
}

// fp16's loss scaling.
void AddLossScalingFlags(TableRows add) {
  add(Section::kPrecision,
      SameOnEveryMachine("a resumed fp16 run takes the loss scale from the checkpoint"),
      Real(
          "loss-scale-init", "S", "greater than 0 and at most 3.4e38 (float32)",
          [](double x) { return x > 0 && x <= kFloat32Max; },
          In<&TrainingConfig::loss_scaling, &LossScalerOptions::init_scale>),
      "--precision fp16: the first loss scale, > 0 (default 65536)");
  add(Section::kPrecision, ChangesTheMath(),
      Real(
          "loss-scale-growth-factor", "F", "greater than 1", [](double x) { return x > 1; },
          In<&TrainingConfig::loss_scaling, &LossScalerOptions::growth_factor>),
      "--precision fp16: the loss scale's factor after --loss-scale-growth-interval clean steps, "
      "> 1 (default 2)");
  add(Section::kPrecision, ChangesTheMath(),
      Real(
          "loss-scale-backoff-factor", "F", "greater than 0 and less than 1",
          [](double x) { return x > 0 && x < 1; },
          In<&TrainingConfig::loss_scaling, &LossScalerOptions::backoff_factor>),
      "--precision fp16: the loss scale's factor at a step skipped for inf/NaN gradients, 0 < f "
      "< 1 (default 0.5)");
  add(Section::kPrecision, ChangesTheMath(),
      Integer<int64_t>("loss-scale-growth-interval", "N", 1, Constant<kInt32Max>,
                       In<&TrainingConfig::loss_scaling, &LossScalerOptions::growth_interval>),
      "--precision fp16: clean steps in a row before the loss scale grows, 1..2147483647 "
      "(default 2000)");
}

// The gradient buckets, the replica check, and where the gradients are summed and updated.
void AddBucketAndPlacementFlags(TableRows add) {
  add(Section::kTraining,
      SameOnEveryMachine("the buckets' size; a checkpoint holds whole parameters"), BucketCap(),
      "gradient bucket size in MiB, > 0 and <= 4096 (default 25)");
  add(Section::kTraining,
      SameOnEveryMachine("a collective every rank joins at the same steps; a resumed run may "
                         "check at another interval"),
      Integer<int64_t>("check-replicas", "N", 0, Constant<kInt64Max>,
                       In<&TrainingConfig::check_replicas>),
      "every N optimizer steps, compare a 64-bit hash of every rank's parameters (8 bytes a "
      "rank through the backend) and fail naming the ranks whose replica differs, which a "
      "restart would not cure; 0 = never (default 0; cost: docs/observability.md)");
  add(Section::kTraining,
      SameOnEveryMachine("the path of the sums, not their values' meaning; a checkpoint holds "
                         "float32 state either way"),
      Choice<training::LocalReduce>("local-reduce", "HOW", training::LocalReduceNames,
                                    In<&TrainingConfig::local_reduce>),
      "how the workers of a machine sum their gradients on the CPU: shm (in the machine's shared "
      "memory, then each worker's part across machines) or backend (all through the backend) "
      "(default shm)");
  add(Section::kTraining,
      SameOnEveryMachine("every rank splits the optimizer alike; a checkpoint holds the state "
                         "whole, so a run resumes sharded or not, at any world size"),
      ShardOptimizer(),
      "each rank keeps the optimizer state of its part of the parameters and updates that part "
      "only, then the parts are gathered (ZeRO stage 1); the same bits as without. auto: on for "
      "a CPU model on one machine whose workers sum in shared memory, where it is faster and "
      "lighter; off elsewhere. The flag alone means on (default auto)");
  add(Section::kTraining,
      SameOnEveryMachine("every rank gathers the gradients of the parts' copies, or none does"),
      Choice("shard-copy", "WHEN", training::ShardCopyNames, In<&TrainingConfig::shard_copy>),
      "with the optimizer state sharded among machines, each rank also keeps a copy of the part "
      "of the rank one machine on, updated every step (one more gather of the gradients), so an "
      "elastic job that loses a machine goes on in place with the whole state; auto: on where "
      "the workers go on in place after a change of machines, off elsewhere (default auto)");
  add(Section::kTraining,
      SameOnEveryMachine("every rank updates its parameters in the same place, so the replicas "
                         "stay identical; a checkpoint is the same either way"),
      Switch("offload-optimizer", SwitchSets::kTrue, In<&TrainingConfig::offload_optimizer>),
      "run the optimizer of a device model (--device cuda, or --mirror-parameters) on a host copy "
      "of its parameters, for state that does not fit on the device (ZeRO-Offload); without it "
      "the optimizer runs where the parameters are when the model can");
}

// Validation while training (training/evaluation.hpp).
void AddValidationFlags(TableRows add) {
  const Agreement collective = SameOnEveryMachine(
      "every rank evaluates its share and stops together; a resumed run may validate otherwise");
  add(Section::kTraining, collective,
      Integer<int64_t>("eval-every", "N", 0, Constant<kInt64Max>, In<&TrainingConfig::eval_every>),
      "evaluate the validation split every N optimizer steps: loss, and perplexity (tokens) or "
      "accuracy, logged and in --metrics/--tensorboard; 0 = never (default 0)");
  add(Section::kTraining, collective,
      Integer<int64_t>("eval-batches", "K", 0, Constant<kInt64Max>,
                       In<&TrainingConfig::eval_batches>),
      "--eval-every: evaluate the first K global batches of the validation split, 0 = all of it "
      "(default 20)");
  add(Section::kTraining, collective,
      Integer<int64_t>("early-stop-patience", "P", 0, Constant<kInt64Max>,
                       In<&TrainingConfig::early_stop_patience>),
      "--eval-every: end the run (checkpoint, test set, export) after P evaluations in a row "
      "without a lower validation loss; 0 = never (default 0)");
}

}  // namespace

// What is trained and how: epochs, batches, data, the optimizer, the schedule, precision,
// validation.
void AddTrainingFlags(TableRows add) {
  AddScheduleAndDataFlags(add);
  AddOptimizerFlags(add);
  AddClippingAndScheduleFlags(add);
  AddLossScalingFlags(add);
  AddBucketAndPlacementFlags(add);
  AddValidationFlags(add);
}

}  // namespace dpl::cli::table
