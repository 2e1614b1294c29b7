// Command-line parsing for the launcher (Boost.Program_options).
//
// Every value flag is read as a string and converted here, so that a bad value gets one message
// style everywhere: the flag, the allowed range or values, and what was given. Precedence, first
// wins: command line, then --config FILE, then the environment (MASTER_ADDR, MASTER_PORT,
// DPL_JOB_TOKEN), then the built-in defaults of cli::Options.
#include "cli/options.hpp"

#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace dpl::cli {
namespace {

namespace po = boost::program_options;

constexpr int kMaxProcesses = 1024;
constexpr int kMaxMachines = 1024;
constexpr int kMaxEpochs = 1000000;
constexpr int kMaxBatchSize = 1 << 20;
constexpr int kMaxThreadsPerWorker = 1024;
constexpr int kMaxGradAccum = 1024;
constexpr int kMaxRestarts = 1000;
constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;
constexpr double kMaxBucketCapMb = 4096.0;
constexpr const char* kSeeHelp = "see launcher --help";
constexpr unsigned kHelpLineLength = 100;

// The flags that take a value. Booleans are separate (bool_switch) because they take none.
po::options_description ValueFlags() {
  po::options_description flags("Options", kHelpLineLength, kHelpLineLength / 2);
  auto text = [](const char* value_name) {
    return po::value<std::string>()->value_name(value_name);
  };
  // clang-format off
  flags.add_options()
    ("config", text("FILE"), "read more flags from FILE (`name = value` lines, names without dashes)")
    ("plugin-dir", po::value<std::vector<std::string>>()->composing()->value_name("DIR"),
     "folder searched first for plugins (repeatable); then $DPL_PLUGIN_PATH, then the install's")
    ("backend", text("NAME"), "communication backend: auto|gloo|nccl|tcp|<plugin name> (default auto)")
    ("backend-options", text("K=V,.."), "backend-specific options \"key=value,key=value\"")
    ("model", text("NAME"), "model plugin name (default convnet)")
    ("model-options", text("K=V,.."), "model-specific options \"key=value,key=value\"")
    ("num-machines", text("N"), "machines in the job, 1..1024 (default 1)")
    ("machine-id", text("N"), "this machine's index, 0..num-machines-1 (default 0)")
    ("num-processes", text("N"), "workers on this machine, 1..1024 (default 1)")
    ("master-addr", text("HOST"), "host of machine 0's store (default $MASTER_ADDR or 127.0.0.1)")
    ("master-port", text("PORT"), "port of machine 0's store, 0..65535 (default $MASTER_PORT or 29500)")
    ("job-token", text("TOKEN"), "shared secret of the job (default $DPL_JOB_TOKEN)")
    ("rendezvous-timeout", text("SECONDS"), "seconds to wait for every worker to join (default 300)")
    ("backend-timeout", text("SECONDS"), "seconds a backend call may block (default 300)")
    ("threads-per-worker", text("N"), "compute threads per worker, 0 = cores / workers (default 0)")
    ("log-dir", text("DIR"), "write one log file per rank into this folder")
    ("epochs", text("N"), "passes over the training set, 1..1000000 (default 1)")
    ("batch-size", text("N"), "GLOBAL batch size, divisible by the world size (default 128)")
    ("data-dir", text("DIR"), "folder holding the IDX .gz files (default /usr/share/datasets/fashion-mnist)")
    ("data-cache", text("DIR"), "folder for inflated copies of .gz data, or none (default $XDG_CACHE_HOME/dpl/data or ~/.cache/dpl/data)")
    ("max-steps", text("N"), "stop after this many optimizer steps, 0 = no limit (default 0)")
    ("seed", text("N"), "seed of initialisation, shuffling and dropout (default 0)")
    ("device", text("DEVICE"), "cpu|cuda (default cpu)")
    ("optimizer", text("NAME"), "adadelta|sgd|adam (default adadelta)")
    ("lr", text("RATE"), "learning rate, > 0 (default 0.5)")
    ("momentum", text("M"), "SGD momentum, 0 <= m < 1 (default 0)")
    ("grad-accum", text("K"), "micro-batches per optimizer step, 1..1024 (default 1)")
    ("grad-compression", text("KIND"), "none|fp16|bf16 (default none)")
    ("bucket-cap-mb", text("MIB"), "gradient bucket size in MiB, > 0 and <= 4096 (default 25)")
    ("log-interval", text("N"), "log the loss every N batches, >= 1 (default 10)")
    ("metrics", text("FILE"), "append JSON-lines metrics to FILE")
    ("checkpoint-dir", text("DIR"), "folder for checkpoints")
    ("checkpoint-every", text("N"), "checkpoint every N steps, 0 = only at the end (default 0)")
    ("max-restarts", text("N"), "restart a failed job up to N times, 0..1000 (default 0)")
    ("dump-parameters", text("DIR"), "each rank writes its final parameters to DIR/rank-N.bin")
    ("local-rank", text("N"), "internal (--worker): the worker's index on this machine")
    ("worker-outputs", text("FD,.."),
     "internal (--worker): load once, then fork one worker per output descriptor")
    ("store-addr", text("HOST:PORT"), "internal (--worker): host:port of the running store");
  // clang-format on
  return flags;
}

struct Switches {
  bool help = false;
  bool version = false;
  bool selftest = false;
  bool worker = false;
  bool drop_last = false;
  bool resume = false;
  bool no_progress = false;
  bool no_eval = false;
  bool mirror_parameters = false;
};

po::options_description SwitchFlags(Switches* switches) {
  po::options_description flags("Switches", kHelpLineLength, kHelpLineLength / 2);
  // clang-format off
  flags.add_options()
    ("help,h", po::bool_switch(&switches->help), "print this help and exit")
    ("version", po::bool_switch(&switches->version), "print the version and ABI versions and exit")
    ("selftest", po::bool_switch(&switches->selftest),
     "rendezvous, barrier and allgather of ranks through the backend; no training")
    ("drop-last", po::bool_switch(&switches->drop_last), "drop the last incomplete batch")
    ("resume", po::bool_switch(&switches->resume), "resume from the newest checkpoint")
    ("no-progress", po::bool_switch(&switches->no_progress), "no terminal progress bar")
    ("no-eval", po::bool_switch(&switches->no_eval), "skip the test-set evaluation at the end")
    ("mirror-parameters", po::bool_switch(&switches->mirror_parameters),
     "run the optimizer on a host copy of the parameters, as --device cuda always does (on cpu: "
     "to test that path)")
    ("worker", po::bool_switch(&switches->worker), "internal: run as a worker of a launcher");
  // clang-format on
  return flags;
}

std::string Quoted(const std::string& text) {
  return "'" + text + "'";
}

// Strict integer conversion: the whole text must be a number in [min, max].
Status ParseInteger(const std::string& flag, const std::string& text, int64_t min, int64_t max,
                    int64_t* out) {
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(begin, end, value);
  const std::string range = "between " + std::to_string(min) + " and " + std::to_string(max);
  if (text.empty() || error == std::errc::invalid_argument || rest != end) {
    return Status::Error(flag + " must be an integer " + range + " (got " + Quoted(text) + ")");
  }
  if (error == std::errc::result_out_of_range || value < min || value > max) {
    return Status::Error(flag + " must be " + range + " (got " + text + ")");
  }
  *out = value;
  return Status::Ok();
}

Status ParseInt(const std::string& flag, const std::string& text, int min, int max, int* out) {
  int64_t value = 0;
  DPL_RETURN_IF_ERROR(ParseInteger(flag, text, min, max, &value));
  *out = static_cast<int>(value);
  return Status::Ok();
}

Status ParseUnsigned64(const std::string& flag, const std::string& text, uint64_t* out) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || rest != end) {
    return Status::Error(flag + " must be an integer between 0 and " +
                         std::to_string(std::numeric_limits<uint64_t>::max()) + " (got " +
                         Quoted(text) + ")");
  }
  *out = value;
  return Status::Ok();
}

// A finite real number; `range` is the human text of the allowed range, checked by `in_range`.
template <typename InRange>
Status ParseReal(const std::string& flag, const std::string& text, const std::string& range,
                 InRange in_range, double* out) {
  errno = 0;
  char* rest = nullptr;
  const double value = std::strtod(text.c_str(), &rest);
  if (text.empty() || rest != text.c_str() + text.size() || errno == ERANGE ||
      !std::isfinite(value)) {
    return Status::Error(flag + " must be a number " + range + " (got " + Quoted(text) + ")");
  }
  if (!in_range(value)) return Status::Error(flag + " must be " + range + " (got " + text + ")");
  *out = value;
  return Status::Ok();
}

Status ParseSeconds(const std::string& flag, const std::string& text,
                    std::chrono::milliseconds* out) {
  double seconds = 0;
  DPL_RETURN_IF_ERROR(ParseReal(
      flag, text, "seconds, at least 0.001 and at most 604800",
      [](double v) { return v >= 0.001 && v <= kMaxTimeoutSeconds; }, &seconds));
  *out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
  return Status::Ok();
}

Status ParseChoice(const std::string& flag, const std::string& text,
                   const std::vector<std::string>& choices, std::string* out) {
  for (const auto& choice : choices) {
    if (text == choice) {
      *out = text;
      return Status::Ok();
    }
  }
  std::string allowed;
  for (const auto& choice : choices) allowed += (allowed.empty() ? "" : "|") + choice;
  return Status::Error(flag + " must be one of " + allowed + " (got " + Quoted(text) + ")");
}

Status ParseNonEmpty(const std::string& flag, const std::string& text, std::string* out) {
  if (text.empty()) return Status::Error(flag + " must not be empty");
  *out = text;
  return Status::Ok();
}

// The text of a flag when it was given anywhere (command line, config file), else nullptr.
const std::string* Given(const po::variables_map& values, const char* name) {
  auto found = values.find(name);
  if (found == values.end() || found->second.defaulted()) return nullptr;
  return &found->second.as<std::string>();
}

// Converts Boost's exceptions into our message style.
Status DescribeParseError(const po::error& error, const std::string& source) {
  if (auto* unknown = dynamic_cast<const po::unknown_option*>(&error)) {
    return Status::Error("unknown flag " + unknown->get_option_name() + source + "; " + kSeeHelp);
  }
  if (auto* missing = dynamic_cast<const po::invalid_command_line_syntax*>(&error)) {
    if (missing->kind() == po::invalid_syntax::missing_parameter) {
      return Status::Error(missing->get_option_name() + " needs a value" + source + "; " +
                           kSeeHelp);
    }
  }
  if (auto* multiple = dynamic_cast<const po::multiple_occurrences*>(&error)) {
    return Status::Error(multiple->get_option_name() + " was given more than once" + source +
                         "; give it once");
  }
  return Status::Error(std::string(error.what()) + source + "; " + kSeeHelp);
}

Status ApplyValues(const po::variables_map& values, Options* options) {
  using S = const std::string*;
  if (S v = Given(values, "backend"))
    DPL_RETURN_IF_ERROR(ParseNonEmpty("--backend", *v, &options->backend));
  if (S v = Given(values, "backend-options")) options->backend_options = *v;
  if (S v = Given(values, "model"))
    DPL_RETURN_IF_ERROR(ParseNonEmpty("--model", *v, &options->model));
  if (S v = Given(values, "model-options")) options->model_options = *v;

  if (S v = Given(values, "num-machines")) {
    DPL_RETURN_IF_ERROR(ParseInt("--num-machines", *v, 1, kMaxMachines, &options->num_machines));
  }
  if (S v = Given(values, "num-processes")) {
    DPL_RETURN_IF_ERROR(ParseInt("--num-processes", *v, 1, kMaxProcesses, &options->num_processes));
  }
  if (S v = Given(values, "machine-id")) {
    DPL_RETURN_IF_ERROR(
        ParseInt("--machine-id", *v, 0, options->num_machines - 1, &options->machine_id));
  }
  if (S v = Given(values, "master-addr")) {
    DPL_RETURN_IF_ERROR(ParseNonEmpty("--master-addr", *v, &options->master_addr));
  }
  if (S v = Given(values, "master-port")) {
    DPL_RETURN_IF_ERROR(ParseInt("--master-port", *v, 0, 65535, &options->master_port));
  }
  if (S v = Given(values, "job-token")) options->job_token = *v;
  if (S v = Given(values, "rendezvous-timeout")) {
    DPL_RETURN_IF_ERROR(ParseSeconds("--rendezvous-timeout", *v, &options->rendezvous_timeout));
  }
  if (S v = Given(values, "backend-timeout")) {
    DPL_RETURN_IF_ERROR(ParseSeconds("--backend-timeout", *v, &options->backend_timeout));
  }
  if (S v = Given(values, "threads-per-worker")) {
    DPL_RETURN_IF_ERROR(ParseInt("--threads-per-worker", *v, 0, kMaxThreadsPerWorker,
                                 &options->threads_per_worker));
  }
  if (S v = Given(values, "log-dir")) options->log_dir = *v;

  if (S v = Given(values, "epochs")) {
    DPL_RETURN_IF_ERROR(ParseInt("--epochs", *v, 1, kMaxEpochs, &options->epochs));
  }
  if (S v = Given(values, "batch-size")) {
    DPL_RETURN_IF_ERROR(ParseInt("--batch-size", *v, 1, kMaxBatchSize, &options->batch_size));
  }
  if (S v = Given(values, "data-cache")) {
    DPL_RETURN_IF_ERROR(ParseNonEmpty("--data-cache", *v, &options->data_cache_dir));
    if (options->data_cache_dir == "none") options->data_cache_dir.clear();
  }
  if (S v = Given(values, "data-dir")) {
    DPL_RETURN_IF_ERROR(ParseNonEmpty("--data-dir", *v, &options->data_dir));
  }
  if (S v = Given(values, "max-steps")) {
    DPL_RETURN_IF_ERROR(ParseInteger("--max-steps", *v, 0, std::numeric_limits<int64_t>::max(),
                                     &options->max_steps));
  }
  if (S v = Given(values, "seed"))
    DPL_RETURN_IF_ERROR(ParseUnsigned64("--seed", *v, &options->seed));
  if (S v = Given(values, "device")) {
    DPL_RETURN_IF_ERROR(ParseChoice("--device", *v, {"cpu", "cuda"}, &options->device));
  }
  if (S v = Given(values, "optimizer")) {
    DPL_RETURN_IF_ERROR(
        ParseChoice("--optimizer", *v, {"adadelta", "sgd", "adam"}, &options->optimizer));
  }
  if (S v = Given(values, "lr")) {
    DPL_RETURN_IF_ERROR(ParseReal(
        "--lr", *v, "greater than 0", [](double x) { return x > 0; }, &options->learning_rate));
  }
  if (S v = Given(values, "momentum")) {
    DPL_RETURN_IF_ERROR(ParseReal(
        "--momentum", *v, "at least 0 and less than 1", [](double x) { return x >= 0 && x < 1; },
        &options->momentum));
  }
  if (S v = Given(values, "grad-accum")) {
    DPL_RETURN_IF_ERROR(ParseInt("--grad-accum", *v, 1, kMaxGradAccum, &options->grad_accum));
  }
  if (S v = Given(values, "grad-compression")) {
    DPL_RETURN_IF_ERROR(ParseChoice("--grad-compression", *v, {"none", "fp16", "bf16"},
                                    &options->grad_compression));
  }
  if (S v = Given(values, "bucket-cap-mb")) {
    double megabytes = 0;
    DPL_RETURN_IF_ERROR(ParseReal(
        "--bucket-cap-mb", *v, "greater than 0 and at most 4096",
        [](double x) { return x > 0 && x <= kMaxBucketCapMb; }, &megabytes));
    options->bucket_cap_bytes =
        std::max<int64_t>(1, static_cast<int64_t>(std::llround(megabytes * 1024.0 * 1024.0)));
  }
  if (S v = Given(values, "log-interval")) {
    DPL_RETURN_IF_ERROR(
        ParseInt("--log-interval", *v, 1, std::numeric_limits<int>::max(), &options->log_interval));
  }
  if (S v = Given(values, "metrics")) options->metrics_file = *v;
  if (S v = Given(values, "checkpoint-dir")) options->checkpoint_dir = *v;
  if (S v = Given(values, "checkpoint-every")) {
    DPL_RETURN_IF_ERROR(ParseInteger("--checkpoint-every", *v, 0,
                                     std::numeric_limits<int64_t>::max(),
                                     &options->checkpoint_every));
  }
  if (S v = Given(values, "max-restarts")) {
    DPL_RETURN_IF_ERROR(ParseInt("--max-restarts", *v, 0, kMaxRestarts, &options->max_restarts));
  }
  if (S v = Given(values, "dump-parameters")) options->dump_parameters_dir = *v;
  if (S v = Given(values, "store-addr")) options->store_addr = *v;
  if (values.count("plugin-dir")) {
    options->plugin_dirs = values["plugin-dir"].as<std::vector<std::string>>();
  }
  return Status::Ok();
}

// Defaults from the environment, used only when neither the command line nor the config file
// set the flag.
Status ApplyEnvironment(const po::variables_map& values, Options* options) {
  if (!Given(values, "master-addr")) {
    if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) options->master_addr = addr;
  }
  if (!Given(values, "master-port")) {
    if (const char* port = std::getenv("MASTER_PORT"); port && *port) {
      DPL_RETURN_IF_ERROR(
          ParseInt("MASTER_PORT (environment)", port, 0, 65535, &options->master_port));
    }
  }
  if (!Given(values, "job-token")) {
    if (const char* token = std::getenv("DPL_JOB_TOKEN")) options->job_token = token;
  }
  if (!Given(values, "data-cache")) {  // the XDG base directory rules, else none
    const char* cache = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (cache && *cache == '/') {
      options->data_cache_dir = std::string(cache) + "/dpl/data";
    } else if (home && *home == '/') {
      options->data_cache_dir = std::string(home) + "/.cache/dpl/data";
    }
  }
  return Status::Ok();
}

// Checks that involve more than one flag.
Status CheckConsistency(const Options& options) {
  const int world_size = options.num_processes * options.num_machines;
  if (options.batch_size % world_size != 0) {
    return Status::Error("--batch-size " + std::to_string(options.batch_size) +
                         " is not divisible by the world size " + std::to_string(world_size) +
                         " (--num-processes " + std::to_string(options.num_processes) +
                         " x --num-machines " + std::to_string(options.num_machines) +
                         "); the global batch is split evenly across workers");
  }
  if (options.command == Command::kWorker) {
    if (options.local_rank < 0 && options.worker_output_fds.empty()) {
      return Status::Error("--worker needs --local-rank or --worker-outputs");
    }
    if (options.local_rank >= 0 && !options.worker_output_fds.empty()) {
      return Status::Error("--worker takes --local-rank or --worker-outputs, not both");
    }
    if (!options.worker_output_fds.empty() &&
        static_cast<int>(options.worker_output_fds.size()) != options.num_processes) {
      return Status::Error(
          "--worker-outputs lists " + std::to_string(options.worker_output_fds.size()) +
          " descriptors for --num-processes " + std::to_string(options.num_processes));
    }
    if (options.store_addr.empty()) return Status::Error("--worker needs --store-addr host:port");
  }
  return Status::Ok();
}

}  // namespace

Result<Options> ParseCommandLine(int argc, const char* const* argv) {
  Options options;
  std::vector<std::string> arguments;
  for (int i = 1; i < argc; ++i) arguments.emplace_back(argv[i]);
  bool plugins_subcommand = false;
  if (!arguments.empty() && arguments.front() == "plugins") {
    plugins_subcommand = true;
    arguments.erase(arguments.begin());
  }

  Switches switches;
  po::options_description all;
  all.add(ValueFlags()).add(SwitchFlags(&switches));
  po::variables_map values;
  try {
    const po::parsed_options parsed =
        po::command_line_parser(arguments)
            .options(all)
            .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
            .run();
    // No positional arguments are accepted: a stray word is an error rather than ignored.
    for (const auto& option : parsed.options) {
      if (option.position_key >= 0 && !option.original_tokens.empty()) {
        return Status::Error("unexpected argument " + Quoted(option.original_tokens.front()) +
                             " (the only subcommand is `plugins`, given first); " + kSeeHelp);
      }
    }
    po::store(parsed, values);
  } catch (const po::error& error) {
    return DescribeParseError(error, "");
  }

  if (const std::string* config = Given(values, "config")) {
    std::ifstream file(*config);
    if (!file) {
      return Status::Error("--config: cannot open " + Quoted(*config) + " (" +
                           std::strerror(errno) + ")");
    }
    try {
      // The command line was stored first, so it wins over the file.
      po::store(po::parse_config_file(file, all), values);
    } catch (const po::error& error) {
      return DescribeParseError(error, " in config file " + *config);
    }
  }
  try {
    po::notify(values);
  } catch (const po::error& error) {
    return DescribeParseError(error, "");
  }

  DPL_RETURN_IF_ERROR(ApplyValues(values, &options));
  DPL_RETURN_IF_ERROR(ApplyEnvironment(values, &options));
  options.drop_last = switches.drop_last;
  options.resume = switches.resume;
  options.progress = !switches.no_progress;
  options.evaluate = !switches.no_eval;
  options.mirror_parameters = switches.mirror_parameters;

  if (switches.help) {
    options.command = Command::kHelp;
  } else if (switches.version) {
    options.command = Command::kVersion;
  } else if (plugins_subcommand) {
    options.command = Command::kPlugins;
  } else if (switches.worker) {
    options.command = Command::kWorker;
  } else if (switches.selftest) {
    options.command = Command::kSelftest;
  }
  if (const std::string* local_rank = Given(values, "local-rank")) {
    if (options.command != Command::kWorker) {
      return Status::Error("--local-rank is internal and only valid with --worker");
    }
    DPL_RETURN_IF_ERROR(
        ParseInt("--local-rank", *local_rank, 0, options.num_processes - 1, &options.local_rank));
  }
  if (const std::string* outputs = Given(values, "worker-outputs")) {
    if (options.command != Command::kWorker) {
      return Status::Error("--worker-outputs is internal and only valid with --worker");
    }
    std::istringstream list(*outputs);
    std::string item;
    while (std::getline(list, item, ',')) {
      int fd = -1;
      DPL_RETURN_IF_ERROR(
          ParseInt("--worker-outputs", item, 0, std::numeric_limits<int>::max(), &fd));
      options.worker_output_fds.push_back(fd);
    }
  }
  // A worker of a selftest job has the role kWorker; the job kind travels in selftest_job.
  options.selftest_job = switches.selftest;
  DPL_RETURN_IF_ERROR(CheckConsistency(options));
  return options;
}

std::string HelpText() {
  Switches unused;
  po::options_description all;
  all.add(ValueFlags()).add(SwitchFlags(&unused));
  std::ostringstream text;
  text << "usage: launcher [options]            train (the default)\n"
          "       launcher --selftest [options]  check rendezvous and the backend, no training\n"
          "       launcher plugins [--plugin-dir DIR]...  list the plugins found\n\n"
          "Every option may also be set in a --config file as `name = value`.\n"
          "Environment defaults: MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN; plugins are also\n"
          "searched in DPL_PLUGIN_PATH (colon-separated).\n\n"
       << all;
  return text.str();
}

namespace {

// The job's flags as a worker reads them, after its role flags.
std::vector<std::string> JobArguments(const Options& options) {
  auto real = [](double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.17g", value);
    return std::string(buffer);
  };
  auto seconds = [&](std::chrono::milliseconds duration) {
    return real(static_cast<double>(duration.count()) / 1000.0);
  };
  std::vector<std::string> args;
  if (options.selftest_job) args.push_back("--selftest");
  for (const auto& dir : options.plugin_dirs) {
    args.insert(args.end(), {"--plugin-dir", dir});
  }
  // Empty values are the defaults of those flags, and some flags refuse an empty value.
  auto add = [&](const char* flag, const std::string& value) {
    if (value.empty()) return;
    args.emplace_back(flag);
    args.push_back(value);
  };
  add("--backend", options.backend);
  add("--backend-options", options.backend_options);
  add("--model", options.model);
  add("--model-options", options.model_options);
  add("--num-machines", std::to_string(options.num_machines));
  add("--machine-id", std::to_string(options.machine_id));
  add("--num-processes", std::to_string(options.num_processes));
  add("--master-addr", options.master_addr);
  add("--master-port", std::to_string(options.master_port));
  // The job token is not passed here: argv is visible to every user in `ps`; the launcher hands
  // it to its workers as DPL_JOB_TOKEN in their environment instead.
  add("--rendezvous-timeout", seconds(options.rendezvous_timeout));
  add("--backend-timeout", seconds(options.backend_timeout));
  add("--threads-per-worker", std::to_string(options.threads_per_worker));
  add("--log-dir", options.log_dir);
  add("--epochs", std::to_string(options.epochs));
  add("--batch-size", std::to_string(options.batch_size));
  add("--data-dir", options.data_dir);
  add("--data-cache", options.data_cache_dir.empty() ? "none" : options.data_cache_dir);
  add("--max-steps", std::to_string(options.max_steps));
  add("--seed", std::to_string(options.seed));
  add("--device", options.device);
  add("--optimizer", options.optimizer);
  add("--lr", real(options.learning_rate));
  add("--momentum", real(options.momentum));
  add("--grad-accum", std::to_string(options.grad_accum));
  add("--grad-compression", options.grad_compression);
  add("--bucket-cap-mb", real(static_cast<double>(options.bucket_cap_bytes) / (1024.0 * 1024.0)));
  add("--log-interval", std::to_string(options.log_interval));
  add("--metrics", options.metrics_file);
  add("--checkpoint-dir", options.checkpoint_dir);
  add("--checkpoint-every", std::to_string(options.checkpoint_every));
  add("--max-restarts", std::to_string(options.max_restarts));
  add("--dump-parameters", options.dump_parameters_dir);
  if (options.drop_last) args.emplace_back("--drop-last");
  if (options.resume) args.emplace_back("--resume");
  if (!options.progress) args.emplace_back("--no-progress");
  if (!options.evaluate) args.emplace_back("--no-eval");
  if (options.mirror_parameters) args.emplace_back("--mirror-parameters");
  return args;
}

std::vector<std::string> Concatenated(std::vector<std::string> head,
                                      const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

}  // namespace

std::vector<std::string> WorkerArguments(const Options& options, int local_rank,
                                         const std::string& store_addr) {
  return Concatenated(
      {"--worker", "--local-rank", std::to_string(local_rank), "--store-addr", store_addr},
      JobArguments(options));
}

std::vector<std::string> WorkerLoaderArguments(const Options& options,
                                               const std::vector<int>& output_fds,
                                               const std::string& store_addr) {
  std::string list;
  for (int fd : output_fds) list += (list.empty() ? "" : ",") + std::to_string(fd);
  return Concatenated({"--worker", "--worker-outputs", list, "--store-addr", store_addr},
                      JobArguments(options));
}

}  // namespace dpl::cli
