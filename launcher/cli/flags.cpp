// The flag table (see flags.hpp). Each entry is built by one of the helpers below, which differ
// only in how the value is read; the entries themselves are at the bottom, in FlagTable().
#include "cli/flags.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "cli/values.hpp"
#include "training/config.hpp"

namespace dpl::cli {
namespace {

using training::TrainingConfig;

constexpr int kMaxProcesses = 1024;
constexpr int kMaxMachines = 1024;
constexpr int kMaxEpochs = 1000000;
constexpr int kMaxBatchSize = 1 << 20;
constexpr int kMaxThreadsPerWorker = 1024;
constexpr int kMaxGradAccum = 1024;
constexpr int kMaxRestarts = 1000;
constexpr double kMaxBucketCapMb = 4096.0;
constexpr double kBytesPerMib = 1024.0 * 1024.0;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Where a flag's value lives: a plain function, so one entry serves both the parser (writing)
// and the workers' argv (reading).
template <typename T>
using Field = T& (*)(Options&);

template <typename T>
const T& Read(Field<T> field, const Options& options) {
  return field(const_cast<Options&>(options));
}

std::vector<std::string> Args(const std::string& name, const std::string& value) {
  return {"--" + name, value};
}

Flag Base(const char* name, const char* value_name, const char* help) {
  Flag flag;
  flag.name = name;
  flag.value_name = value_name;
  flag.help = help;
  return flag;
}

// An integer in [min, max_of(options)]; the maximum may depend on a flag applied before.
template <typename Int>
Flag Integer(const char* name, const char* value_name, const char* help, int64_t min,
             int64_t (*max_of)(const Options&), Field<Int> field) {
  Flag flag = Base(name, value_name, help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    int64_t value = 0;
    DPL_RETURN_IF_ERROR(ParseInteger(label, text, min, max_of(parsed->options), &value));
    field(parsed->options) = static_cast<Int>(value);
    return Status::Ok();
  };
  flag.forward = [=](const Options& o) { return Args(name, std::to_string(Read(field, o))); };
  return flag;
}

template <int64_t kMax>
int64_t Constant(const Options&) {
  return kMax;
}

Flag Unsigned64(const char* name, const char* value_name, const char* help, Field<uint64_t> field) {
  Flag flag = Base(name, value_name, help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseUnsigned64(label, text, &field(parsed->options));
  };
  flag.forward = [=](const Options& o) { return Args(name, std::to_string(Read(field, o))); };
  return flag;
}

Flag Real(const char* name, const char* value_name, const char* help, const char* range,
          bool (*in_range)(double), Field<double> field) {
  Flag flag = Base(name, value_name, help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseReal(label, text, range, in_range, &field(parsed->options));
  };
  flag.forward = [=](const Options& o) { return Args(name, ExactText(Read(field, o))); };
  return flag;
}

Flag Seconds(const char* name, const char* help, Field<std::chrono::milliseconds> field) {
  Flag flag = Base(name, "SECONDS", help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseSeconds(label, text, &field(parsed->options));
  };
  flag.forward = [=](const Options& o) {
    return Args(name, ExactText(static_cast<double>(Read(field, o).count()) / 1000.0));
  };
  return flag;
}

template <typename Enum>
Flag Choice(const char* name, const char* value_name, const char* help,
            const training::Spellings<Enum>& (*choices)(), Field<Enum> field) {
  Flag flag = Base(name, value_name, help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseChoice(label, text, choices(), &field(parsed->options));
  };
  flag.forward = [=](const Options& o) {
    return Args(name, training::NameOf(choices(), Read(field, o)));
  };
  return flag;
}

// Free text; `non_empty` refuses "". Workers get it unless it is empty (the default of every
// text flag, which some flags could not take back).
Flag Text(const char* name, const char* value_name, const char* help, bool non_empty,
          Field<std::string> field) {
  Flag flag = Base(name, value_name, help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (non_empty) return ParseNonEmpty(label, text, &field(parsed->options));
    field(parsed->options) = text;
    return Status::Ok();
  };
  flag.forward = [=](const Options& o) {
    const std::string& value = Read(field, o);
    return value.empty() ? std::vector<std::string>{} : Args(name, value);
  };
  return flag;
}

// A switch that sets `field` to `when_given`; workers get it when the field has that value.
Flag Switch(const char* name, const char* help, bool when_given, Field<bool> field) {
  Flag flag = Base(name, "", help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    bool given = false;
    DPL_RETURN_IF_ERROR(ParseBool(label, text, &given));
    if (given) field(parsed->options) = when_given;
    return Status::Ok();
  };
  flag.forward = [=](const Options& o) {
    return Read(field, o) == when_given ? std::vector<std::string>{"--" + std::string(name)}
                                        : std::vector<std::string>{};
  };
  return flag;
}

// A switch that picks the command (--help, --version, ...); never forwarded by the table.
Flag CommandSwitch(const char* name, const char* help, bool ParsedFlags::*member) {
  Flag flag = Base(name, "", help);
  flag.apply = [=](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    return ParseBool(label, text, &(parsed->*member));
  };
  flag.forward = [](const Options&) { return std::vector<std::string>{}; };
  return flag;
}

// Every machine must give the same value (Flag::must_match).
Flag MustMatch(Flag flag) {
  flag.must_match = true;
  return flag;
}

// Not passed on to workers or to the launchers of other machines.
Flag NotForwarded(Flag flag) {
  flag.forward = [](const Options&) { return std::vector<std::string>{}; };
  return flag;
}

// --num-machines N, or MIN:MAX for an elastic job.
Flag MachineCount() {
  Flag flag =
      Base("num-machines", "N|MIN:MAX",
           "machines in the job, 1..1024 (default 1); MIN:MAX for an elastic job: it starts "
           "once MIN machines joined and none came for --join-grace, and when one fails "
           "the others restart (--max-restarts) from the newest checkpoint with the "
           "machines left");
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    const size_t colon = text.find(':');
    int64_t least = 0, most = 0;
    if (colon == std::string::npos) {
      DPL_RETURN_IF_ERROR(ParseInteger(label, text, 1, kMaxMachines, &most));
      least = most;
    } else {
      DPL_RETURN_IF_ERROR(
          ParseInteger(label + " MIN", text.substr(0, colon), 1, kMaxMachines, &least));
      DPL_RETURN_IF_ERROR(
          ParseInteger(label + " MAX", text.substr(colon + 1), 1, kMaxMachines, &most));
      if (least > most) {
        return Status::InvalidArgument(label + " " + text + " goes down; write it as " +
                                       std::to_string(most) + ":" + std::to_string(least));
      }
    }
    parsed->options.min_machines = static_cast<int>(least);
    parsed->options.num_machines = static_cast<int>(most);
    return Status::Ok();
  };
  flag.forward = [](const Options& o) {
    std::string count = std::to_string(o.num_machines);
    if (o.elastic()) count = std::to_string(o.min_machines) + ":" + count;
    return Args("num-machines", count);
  };
  return flag;
}

// --machine-id N or auto; its range depends on --num-machines, applied before.
Flag MachineId() {
  Flag flag = Base("machine-id", "N|auto",
                   "this machine's index, 0..num-machines-1, or auto (the default): machine 0 is "
                   "the one whose address is --master-addr, the others are numbered as they join");
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (text == "auto") {
      parsed->options.machine_id = kAutoMachineId;
      return Status::Ok();
    }
    int64_t id = 0;
    DPL_RETURN_IF_ERROR(ParseInteger(label, text, 0, parsed->options.num_machines - 1, &id));
    parsed->options.machine_id = static_cast<int>(id);
    return Status::Ok();
  };
  flag.forward = [](const Options& o) {
    return Args("machine-id",
                o.machine_id == kAutoMachineId ? "auto" : std::to_string(o.machine_id));
  };
  return flag;
}

Flag Internal(Flag flag) {
  flag.internal = true;
  flag.forward = [](const Options&) { return std::vector<std::string>{}; };
  return flag;
}

// A default from the environment variable `variable` when it is set and not empty.
Flag FromEnvironment(Flag flag, const char* variable) {
  flag.environment = [variable]() -> std::optional<std::pair<std::string, std::string>> {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::make_pair(std::string(variable) + " (environment)", std::string(value));
  };
  return flag;
}

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

// --config is read by the parser itself, before every other flag (cli/options.cpp).
Flag ConfigFile() {
  // clang-format off
  Flag config = Base("config", "FILE", "read more flags from FILE (`name = value` lines, names without dashes)");
  config.apply = [](const std::string&, const std::string&, ParsedFlags*) { return Status::Ok(); };
  config.forward = [](const Options&) { return std::vector<std::string>{}; };
  // clang-format on
  return config;
}

Flag PluginDirs() {
  // clang-format off
  Flag plugin_dir = Base("plugin-dir", "DIR", "folder searched first for plugins (repeatable); then $DPL_PLUGIN_PATH, then the install's");
  plugin_dir.repeatable = true;
  plugin_dir.apply = [](const std::string&, const std::string& text, ParsedFlags* parsed) {
    parsed->options.plugin_dirs.push_back(text);
    return Status::Ok();
  };
  plugin_dir.forward = [](const Options& o) {
    std::vector<std::string> args;
    for (const auto& dir : o.plugin_dirs) args.insert(args.end(), {"--plugin-dir", dir});
    return args;
  };
  // clang-format on
  return plugin_dir;
}

// Never forwarded in argv, which every user can read in `ps`: the launcher hands the token to
// its workers as DPL_JOB_TOKEN in their environment instead.
Flag JobToken() {
  // clang-format off
  Flag job_token = FromEnvironment(Text("job-token", "TOKEN", "shared secret of the job (default $DPL_JOB_TOKEN)", false,
                                        [](Options& o) -> std::string& { return o.job_token; }), "DPL_JOB_TOKEN");
  job_token.forward = [](const Options&) { return std::vector<std::string>{}; };
  // clang-format on
  return job_token;
}

Flag StallWarning() {
  // clang-format off
  Flag stall = Seconds("stall-warning", "report a backend call blocked this long: which ranks wait in which collective, which never came; 0 = never (default 60)",
                       [](Options& o) -> std::chrono::milliseconds& { return o.stall_warning; });
  stall.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (text == "0") {
      parsed->options.stall_warning = std::chrono::milliseconds(0);
      return Status::Ok();
    }
    return ParseSeconds(label, text, &parsed->options.stall_warning);
  };
  // clang-format on
  return stall;
}

Flag DataCache() {
  // clang-format off
  Flag data_cache = Base("data-cache", "DIR", "folder for inflated copies of .gz data, or none (default $XDG_CACHE_HOME/dpl/data or ~/.cache/dpl/data)");
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
  // clang-format on
  return data_cache;
}

Flag LrStepSize() {
  // clang-format off
  Flag step_size = Integer<int64_t>("lr-step-size", "N", "--lr-schedule step: optimizer steps between decays by --lr-gamma, >= 1 (needed by step)", 1,
                                    Constant<kInt64Max>, [](Options& o) -> int64_t& { return o.training.lr_step_size; });
  step_size.forward = [](const Options& o) {
    const int64_t steps = o.training.lr_step_size;
    return steps == 0 ? std::vector<std::string>{} : Args("lr-step-size", std::to_string(steps));
  };
  // clang-format on
  return step_size;
}

Flag BucketCap() {
  // clang-format off
  Flag bucket = Base("bucket-cap-mb", "MIB", "gradient bucket size in MiB, > 0 and <= 4096 (default 25)");
  bucket.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    double megabytes = 0;
    DPL_RETURN_IF_ERROR(ParseReal(label, text, "greater than 0 and at most 4096",
                                  [](double x) { return x > 0 && x <= kMaxBucketCapMb; }, &megabytes));
    parsed->options.training.bucket_cap_bytes =
        std::max<int64_t>(1, static_cast<int64_t>(std::llround(megabytes * kBytesPerMib)));
    return Status::Ok();
  };
  bucket.forward = [](const Options& o) {
    return Args("bucket-cap-mb", ExactText(static_cast<double>(o.training.bucket_cap_bytes) / kBytesPerMib));
  };
  // clang-format on
  return bucket;
}

Flag SelfTest() {
  // clang-format off
  Flag selftest = CommandSwitch("selftest", "rendezvous, then a barrier and an allgather of ranks through the backend; no training",
                                &ParsedFlags::selftest);
  selftest.forward = [](const Options& o) {
    return o.selftest_job ? std::vector<std::string>{"--selftest"} : std::vector<std::string>{};
  };
  // clang-format on
  return selftest;
}

Flag WorkerOutputs() {
  // clang-format off
  Flag outputs = Internal(Base("worker-outputs", "FD,..", "load once, then fork one worker per output descriptor"));
  outputs.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    std::istringstream list(text);
    for (std::string item; std::getline(list, item, ',');) {
      int64_t fd = -1;
      DPL_RETURN_IF_ERROR(ParseInteger(label, item, 0, std::numeric_limits<int>::max(), &fd));
      parsed->options.worker_output_fds.push_back(static_cast<int>(fd));
    }
    return Status::Ok();
  };
  // clang-format on
  return outputs;
}

// The plugins: where they are searched, which backend and model, with their options.
void AddPluginFlags(std::vector<Flag>& flags) {
  auto add = [&](Flag flag) { flags.push_back(std::move(flag)); };
  // clang-format off
  add(ConfigFile());
  add(PluginDirs());
  add(MustMatch(Text("backend", "NAME", "communication backend: auto|gloo|nccl|tcp|<plugin name> (default auto)", true,
           [](Options& o) -> std::string& { return o.backend; })));
  add(Text("backend-options", "K=V,..", "backend-specific options \"key=value,key=value\"", false,
           [](Options& o) -> std::string& { return o.backend_options; }));
  add(MustMatch(Text("model", "NAME", "model plugin name (default convnet)", true,
                     [](Options& o) -> std::string& { return o.training.model; })));
  add(MustMatch(Text("model-options", "K=V,..", "model-specific options \"key=value,key=value\"", false,
                     [](Options& o) -> std::string& { return o.training.model_options; })));
  // clang-format on
}

// The job's shape and its wiring: machines, processes, the store, timeouts, threads, logs.
void AddJobFlags(std::vector<Flag>& flags) {
  auto add = [&](Flag flag) { flags.push_back(std::move(flag)); };
  // clang-format off
  add(MustMatch(MachineCount()));
  add(MachineId());
  add(MustMatch(Integer<int>("num-processes", "N", "workers on this machine, 1..1024 (default 1)", 1, Constant<kMaxProcesses>,
                             [](Options& o) -> int& { return o.num_processes; })));
  add(FromEnvironment(Text("master-addr", "HOST", "host of machine 0's store (default $MASTER_ADDR, the cluster's, or 127.0.0.1)", true,
                           [](Options& o) -> std::string& { return o.master_addr; }), "MASTER_ADDR"));
  add(FromEnvironment(Integer<int>("master-port", "PORT", "port of machine 0's store, 0..65535 (default $MASTER_PORT, the cluster's, or 29500)", 0,
                                   Constant<65535>, [](Options& o) -> int& { return o.master_port; }), "MASTER_PORT"));
  add(JobToken());
  add(MustMatch(Text("store", "URL", "where the job's keys live: etcd://HOST:PORT[,HOST:PORT...] keeps them in an etcd cluster, which outlives any machine of the job (default: the built-in store of machine 0)", false,
                     [](Options& o) -> std::string& { return o.store; })));
  add(Seconds("rendezvous-timeout", "seconds to wait for every worker to join (default 300)",
              [](Options& o) -> std::chrono::milliseconds& { return o.rendezvous_timeout; }));
  add(Seconds("backend-timeout", "seconds a backend call may block (default 300)",
              [](Options& o) -> std::chrono::milliseconds& { return o.backend_timeout; }));
  add(Seconds("join-grace", "an elastic job starts once MIN machines joined and no other came for this long (default 5)",
              [](Options& o) -> std::chrono::milliseconds& { return o.join_grace; }));
  add(NotForwarded(Text("hostfile", "FILE", "start a launcher with these flags on every host of FILE (`HOST slots=N` lines, as DeepSpeed's; slots = --num-processes), over ssh for the other hosts; machine 0 is the first host", true,
                        [](Options& o) -> std::string& { return o.hostfile; })));
  add(NotForwarded(Text("ssh-options", "\"ARGS\"", "more arguments for ssh to the hosts of --hostfile (\"-p 2222 -i KEY\"); ssh runs in batch mode", false,
                        [](Options& o) -> std::string& { return o.ssh_options; })));
  add(NotForwarded(Switch("exit-with-stdin", "stop the job when standard input closes (--hostfile starts the launchers of other hosts so, over ssh)", true,
                          [](Options& o) -> bool& { return o.exit_with_stdin; })));
  add(StallWarning());
  add(Integer<int>("threads-per-worker", "N", "compute threads per worker, 0 = cores / workers (default 0)", 0,
                   Constant<kMaxThreadsPerWorker>, [](Options& o) -> int& { return o.threads_per_worker; }));
  add(Text("log-dir", "DIR", "write one log file per rank into this folder", false,
           [](Options& o) -> std::string& { return o.log_dir; }));
  add(Choice<log::TimeFormat>("log-time", "FORMAT", "time on each log line: iso (local time, ISO 8601), elapsed (seconds since the start) or none (default iso)",
                              LogTimeNames, [](Options& o) -> log::TimeFormat& { return o.log_time; }));
  // clang-format on
}

// What is trained and how: epochs, batches, data, the optimizer, the schedule, precision.
void AddTrainingFlags(std::vector<Flag>& flags) {
  auto add = [&](Flag flag) { flags.push_back(std::move(flag)); };
  // clang-format off
  add(MustMatch(Integer<int>("epochs", "N", "passes over the training set, 1..1000000 (default 1)", 1, Constant<kMaxEpochs>,
                             [](Options& o) -> int& { return o.training.epochs; })));
  add(MustMatch(Integer<int>("batch-size", "N", "GLOBAL batch size, divisible by the world size (default 128)", 1,
                             Constant<kMaxBatchSize>, [](Options& o) -> int& { return o.training.batch_size; })));
  add(MustMatch(Text("data", "FORMAT", "data set plugin: idx|npy|cifar10|imagefolder|<plugin name> (default idx)", true,
                     [](Options& o) -> std::string& { return o.training.data_format; })));
  add(MustMatch(Text("data-dir", "DIR", "folder holding the data (default /usr/share/datasets/fashion-mnist, for idx)", true,
                     [](Options& o) -> std::string& { return o.training.data_dir; })));
  add(MustMatch(Text("data-options", "K=V,..", "data-set-specific options \"key=value,key=value\" (mean=, std=, crop=, flip=, ...)", false,
                     [](Options& o) -> std::string& { return o.training.data_options; })));
  add(DataCache());
  add(MustMatch(Integer<int64_t>("max-steps", "N", "stop after this many optimizer steps, 0 = no limit (default 0)", 0,
                                 Constant<kInt64Max>, [](Options& o) -> int64_t& { return o.training.max_steps; })));
  add(MustMatch(Unsigned64("seed", "N", "seed of initialisation, shuffling and dropout (default 0)",
                           [](Options& o) -> uint64_t& { return o.training.seed; })));
  add(MustMatch(Choice<training::Device>("device", "DEVICE", "cpu|cuda (default cpu)", training::DeviceNames,
                                         [](Options& o) -> training::Device& { return o.training.device; })));
  add(MustMatch(Choice<training::OptimizerKind>("optimizer", "NAME", "adadelta|sgd|adam (default adadelta)", training::OptimizerNames,
                                                [](Options& o) -> training::OptimizerKind& { return o.training.optimizer; })));
  add(MustMatch(Real("lr", "RATE", "learning rate, > 0 (default 0.5)", "greater than 0", [](double x) { return x > 0; },
                     [](Options& o) -> double& { return o.training.learning_rate; })));
  add(MustMatch(Real("momentum", "M", "SGD momentum, 0 <= m < 1 (default 0)", "at least 0 and less than 1",
                     [](double x) { return x >= 0 && x < 1; }, [](Options& o) -> double& { return o.training.momentum; })));
  add(MustMatch(Integer<int>("grad-accum", "K", "micro-batches per optimizer step, 1..1024 (default 1)", 1, Constant<kMaxGradAccum>,
                             [](Options& o) -> int& { return o.training.grad_accum; })));
  add(MustMatch(Choice<training::GradientCompression>("grad-compression", "KIND", "format of the gradients on the wire: auto|none|fp16|bf16 (default auto: the --precision's, so bf16 and fp16 training send 16-bit buckets and fp32 float32 ones); an explicit value wins; the backend sums 16-bit buckets in float32", training::CompressionNames,
                                                      [](Options& o) -> training::GradientCompression& { return o.training.grad_compression; })));
  add(MustMatch(Choice<training::Precision>("precision", "FORMAT", "arithmetic of the forward pass: fp32|bf16|fp16 (default fp32); bf16 and fp16 autocast convolutions and matrix products to 16 bits, with the loss, the master parameters and the optimizer in float32; fp16 scales the loss dynamically (--loss-scale-*) and skips a step whose gradients overflow", training::PrecisionNames,
                                            [](Options& o) -> training::Precision& { return o.training.precision; })));
  add(MustMatch(Real("weight-decay", "L2", "L2 penalty the optimizer adds to the gradients, as torch.optim's weight_decay, >= 0 (default 0)", "at least 0",
                     [](double x) { return x >= 0; }, [](Options& o) -> double& { return o.training.weight_decay; })));
  add(MustMatch(Real("clip-grad-norm", "MAX", "scale the averaged gradients down to this global L2 norm when above it (clip_grad_norm_), 0 = off (default 0)", "at least 0",
                     [](double x) { return x >= 0; }, [](Options& o) -> double& { return o.training.clip_grad_norm; })));
  add(MustMatch(Choice<training::LrScheduleKind>("lr-schedule", "NAME", "learning rate over the optimizer steps of --epochs, as torch.optim.lr_scheduler: constant|step (StepLR)|cosine (CosineAnnealingLR to 0)|linear (LinearLR to 0) (default constant); --max-steps stops inside it", training::LrScheduleNames,
                                                 [](Options& o) -> training::LrScheduleKind& { return o.training.lr_schedule; })));
  add(MustMatch(Integer<int64_t>("warmup-steps", "N", "optimizer steps ramping the learning rate linearly up to --lr before the schedule starts, >= 0 (default 0)", 0,
                                 Constant<kInt64Max>, [](Options& o) -> int64_t& { return o.training.warmup_steps; })));
  add(MustMatch(LrStepSize()));
  add(MustMatch(Real("lr-gamma", "G", "--lr-schedule step: the factor of each decay, > 0 (default 0.1)", "greater than 0",
                     [](double x) { return x > 0; }, [](Options& o) -> double& { return o.training.lr_gamma; })));
  add(MustMatch(Real("loss-scale-init", "S", "--precision fp16: the first loss scale, > 0 (default 65536)", "greater than 0 and at most 3.4e38 (float32)",
                     [](double x) { return x > 0 && x <= double(std::numeric_limits<float>::max()); },
                     [](Options& o) -> double& { return o.training.loss_scale_init; })));
  add(MustMatch(Real("loss-scale-growth-factor", "F", "--precision fp16: the loss scale's factor after --loss-scale-growth-interval clean steps, > 1 (default 2)", "greater than 1",
                     [](double x) { return x > 1; }, [](Options& o) -> double& { return o.training.loss_scale_growth_factor; })));
  add(MustMatch(Real("loss-scale-backoff-factor", "F", "--precision fp16: the loss scale's factor at a step skipped for inf/NaN gradients, 0 < f < 1 (default 0.5)", "greater than 0 and less than 1",
                     [](double x) { return x > 0 && x < 1; }, [](Options& o) -> double& { return o.training.loss_scale_backoff_factor; })));
  add(MustMatch(Integer<int64_t>("loss-scale-growth-interval", "N", "--precision fp16: clean steps in a row before the loss scale grows, 1..2147483647 (default 2000)", 1,
                                 Constant<std::numeric_limits<int32_t>::max()>, [](Options& o) -> int64_t& { return o.training.loss_scale_growth_interval; })));
  add(MustMatch(BucketCap()));
  // clang-format on
}

// What a run writes: logs of the loss, metrics, traces, checkpoints, parameters, exports.
void AddOutputFlags(std::vector<Flag>& flags) {
  auto add = [&](Flag flag) { flags.push_back(std::move(flag)); };
  // clang-format off
  add(Integer<int>("log-interval", "N", "log the loss every N batches, >= 1 (default 10)", 1,
                   Constant<std::numeric_limits<int>::max()>, [](Options& o) -> int& { return o.training.log_interval; }));
  add(Text("metrics", "FILE", "write JSON-lines metrics to FILE: a line per logged step, epoch and evaluation (appended with --resume)", false,
           [](Options& o) -> std::string& { return o.training.metrics_file; }));
  add(Text("tensorboard", "DIR", "write TensorBoard event files (train/ and eval/ scalars) into DIR", false,
           [](Options& o) -> std::string& { return o.training.tensorboard_dir; }));
  add(Text("trace", "FILE", "write a timeline of every rank to FILE (Chrome / Perfetto JSON: ui.perfetto.dev)", false,
           [](Options& o) -> std::string& { return o.training.trace_file; }));
  add(Text("checkpoint-dir", "DIR", "folder for checkpoints", false,
           [](Options& o) -> std::string& { return o.training.checkpoint_dir; }));
  add(Integer<int64_t>("checkpoint-every", "N", "checkpoint every N steps, 0 = only at the end (default 0)", 0,
                       Constant<kInt64Max>, [](Options& o) -> int64_t& { return o.training.checkpoint_every; }));
  add(Integer<int>("max-restarts", "N", "restart a failed job up to N times, 0..1000 (default 0)", 0,
                   Constant<kMaxRestarts>, [](Options& o) -> int& { return o.max_restarts; }));
  add(Text("dump-parameters", "DIR", "each rank writes its final parameters to DIR/rank-N.bin (float32, back to back) and its buffers, if any, to DIR/rank-N.buffers.bin", false,
           [](Options& o) -> std::string& { return o.training.dump_parameters_dir; }));
  add(Text("export", "FILE", "at the end, rank 0 writes the trained model for Python to FILE (torch.load or torch.jit.load)", false,
           [](Options& o) -> std::string& { return o.training.export_file; }));
  add(Text("init-from", "FILE", "start from the state dict in FILE (torch.save of {name: tensor}), e.g. to fine-tune", false,
           [](Options& o) -> std::string& { return o.training.init_from; }));
  // clang-format on
}

// The commands and switches, then what the launcher sets for its workers.
void AddCommandFlags(std::vector<Flag>& flags) {
  auto add = [&](Flag flag) { flags.push_back(std::move(flag)); };
  // clang-format off
  add(CommandSwitch("help", "print this help and exit", &ParsedFlags::help));
  add(CommandSwitch("version", "print the version and ABI versions and exit", &ParsedFlags::version));
  add(MustMatch(SelfTest()));
  add(MustMatch(Switch("drop-last", "drop the last incomplete batch", true,
                       [](Options& o) -> bool& { return o.training.drop_last; })));
  add(Switch("resume", "resume from the newest checkpoint", true, [](Options& o) -> bool& { return o.training.resume; }));
  add(Switch("no-progress", "no progress bar on the terminal (there is none when the output is not a terminal)", false,
             [](Options& o) -> bool& { return o.training.progress; }));
  add(MustMatch(Switch("no-eval", "skip the test-set evaluation at the end", false,
                       [](Options& o) -> bool& { return o.training.evaluate; })));
  add(MustMatch(Switch("mirror-parameters", "run the optimizer on a host copy of the parameters, as --device cuda always does (on cpu: to test that path)",
                       true, [](Options& o) -> bool& { return o.training.mirror_parameters; })));
  // Set by the launcher for its workers.
  add(Internal(CommandSwitch("worker", "run as a worker of a launcher", &ParsedFlags::worker)));
  add(Internal(Integer<int>("local-rank", "N", "the worker's index on this machine", 0,
                            [](const Options& o) -> int64_t { return o.num_processes - 1; },
                            [](Options& o) -> int& { return o.local_rank; })));
  add(WorkerOutputs());
  add(Internal(Text("store-addr", "HOST:PORT", "host:port of the running store", false,
                    [](Options& o) -> std::string& { return o.store_addr; })));
  // clang-format on
}

// In the order values are applied (flags.hpp); --help lists them in this order too.
std::vector<Flag> BuildFlagTable() {
  std::vector<Flag> flags;
  AddPluginFlags(flags);
  AddJobFlags(flags);
  AddTrainingFlags(flags);
  AddOutputFlags(flags);
  AddCommandFlags(flags);
  return flags;
}

}  // namespace

const std::vector<Flag>& FlagTable() {
  static const std::vector<Flag> table = BuildFlagTable();
  return table;
}

std::string CanonicalFlagName(const std::string& name) {
  std::string canonical = name;
  for (char& c : canonical) c = c == '_' ? '-' : c;
  return canonical;
}

const Flag* FindFlag(const std::string& name) {
  const std::string canonical = CanonicalFlagName(name);
  for (const Flag& flag : FlagTable()) {
    if (flag.name == canonical) return &flag;
  }
  return nullptr;
}

}  // namespace dpl::cli
