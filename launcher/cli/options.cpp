// Command-line parsing for the launcher, driven by the flag table (cli/flags.hpp).
//
// Precedence, first wins: the command line, then --config FILE, then the environment defaults a
// flag names (MASTER_ADDR, ...), then what the cluster's environment says (Note [Cluster
// defaults]), then the built-in defaults of Options. Flag names may be spelled with '-' or '_'
// (`num_processes = 2`), torchrun's names are aliases (cluster/torchrun_flags.hpp), and an
// unknown name is answered with the closest known one. Values are applied in table order, so a
// range that depends on another flag sees it.
//
// Note [Cluster defaults]
// A launcher (not a worker, whose flags all come from its launcher, nor `plugins`, --help or
// --version) reads the cluster's environment once: a Slurm step, or the variables torchrun and
// Kubeflow's PyTorchJob set (cluster/environment.cpp has the rules). It gives --num-machines,
// --machine-id, --master-addr, --master-port, --job-token and --num-processes where nothing
// before it in the precedence did; an environment that contradicts itself is an error naming
// the variables. The launcher's first line is its description, with the flags that won over it.
#include "cli/options.hpp"

#include <algorithm>
#include <map>
#include <thread>

#include "cli/config_file.hpp"
#include "cli/consistency.hpp"
#include "cli/flag_kinds.hpp"
#include "cli/flags.hpp"
#include "cluster/environment.hpp"
#include "cluster/torchrun_flags.hpp"
#include "protocol/worker_command.hpp"

namespace dpl::cli {
namespace {

constexpr const char* kSeeHelp = "see launcher --help";

// The values a flag was given, and where each came from: "" for the command line, else its
// ConfigPlace ("config file F, line N").
struct GivenValues {
  std::vector<std::string> values;
  std::vector<std::string> places;
};
using GivenFlags = std::map<std::string, GivenValues>;  // by canonical flag name

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substituted = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substituted});
    }
  }
  return row[b.size()];
}

// " (did you mean --epochs?)" for a name close to a public flag's, else "".
std::string DidYouMean(const std::string& name, const std::string& dashes) {
  const std::string canonical = CanonicalFlagName(name);
  const Flag* best = nullptr;
  size_t best_distance = 0;
  for (const Flag& flag : FlagTable()) {
    if (flag.internal) continue;
    const size_t distance = EditDistance(canonical, flag.name);
    if (best == nullptr || distance < best_distance) {
      best = &flag;
      best_distance = distance;
    }
  }
  const size_t allowed = std::max<size_t>(1, std::min<size_t>(2, canonical.size() / 3));
  if (best == nullptr || best_distance > allowed) return "";
  return " (did you mean " + dashes + best->name + "?)";
}

Status UnknownFlag(const std::string& shown, const std::string& name, const std::string& dashes) {
  const std::string advice = cluster::OtherLaunchersFlagAdvice(CanonicalFlagName(name));
  if (!advice.empty()) return Status::InvalidArgument("unknown flag " + shown + ": " + advice);
  return Status::InvalidArgument("unknown flag " + shown + DidYouMean(name, dashes) + "; " +
                                 kSeeHelp);
}

// "PLACE: message", or the message alone for the command line.
std::string At(const std::string& place, const std::string& message) {
  return place.empty() ? message : place + ": " + message;
}

Status Record(const Flag& flag, const std::string& shown, std::string value,
              const std::string& place, GivenFlags* given) {
  GivenValues& entry = (*given)[flag.name];
  if (!entry.values.empty() && !flag.repeatable) {
    return Status::InvalidArgument(At(place, shown + " was given more than once; give it once"));
  }
  entry.values.push_back(std::move(value));
  entry.places.push_back(place);
  return Status::Ok();
}

// A torchrun flag (--nnodes 2) as the dpl flags it stands for (--num-machines 2).
Status RecordAlias(const cluster::FlagAlias& alias, const std::string& value,
                   const std::string& place, GivenFlags* given) {
  const int cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  auto translated = cluster::TranslateTorchrunFlag(alias, value, cpu_count, std::nullopt);
  if (!translated.ok()) return Status::InvalidArgument(At(place, translated.status().message()));
  for (const auto& [name, text] : *translated) {
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) return Status::Error("torchrun alias of unknown flag --" + name);
    const std::string shown = std::string("--") + alias.name + " (--" + flag->name + ")";
    DPL_RETURN_IF_ERROR(Record(*flag, shown, text, place, given));
  }
  return Status::Ok();
}

// The program's words run after `--`; a flag cannot give them.
Status ProgramOnlyAfterDashes(const std::string& shown) {
  return Status::InvalidArgument(shown +
                                 ": give the program after `--`: launcher [flags] -- PROGRAM "
                                 "[ARGS...]");
}

// The words after the first `--`: the program and its arguments (Note [A program's workers]).
Status CollectProgram(const std::vector<std::string>& words, GivenFlags* given) {
  if (words.empty()) {
    return Status::InvalidArgument(
        "`--` must be followed by the program to run: launcher [flags] -- PROGRAM [ARGS...] "
        "(e.g. -- python3 train.py)");
  }
  GivenValues& program = (*given)[kProgramFlag];
  program.values = words;
  program.places.assign(words.size(), "");  // the command line
  return Status::Ok();
}

Status CollectCommandLine(const std::vector<std::string>& arguments, GivenFlags* given) {
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument == "--") {
      return CollectProgram(
          {arguments.begin() + static_cast<std::ptrdiff_t>(i) + 1, arguments.end()}, given);
    }
    if (argument.size() > 1 && argument[0] == '-' && argument[1] != '-' && argument != "-h") {
      return UnknownFlag(argument, argument.substr(1), "--");  // -m, -v: dpl's flags are long
    }
    if (argument.rfind("--", 0) != 0 && argument != "-h") {
      return Status::InvalidArgument("unexpected argument '" + argument +
                                     "' (the only subcommand is `plugins`, given first); " +
                                     kSeeHelp + table::ProgramHint(argument));
    }
    std::string name = argument == "-h" ? "help" : argument.substr(2);
    std::optional<std::string> value;
    if (const auto equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name.resize(equals);
    }
    const Flag* flag = FindFlag(name);
    const std::string shown = "--" + name;
    const cluster::FlagAlias* alias = flag ? nullptr : cluster::FindTorchrunAlias(name);
    if (flag == nullptr && alias == nullptr) return UnknownFlag(shown, name, "--");
    if (flag != nullptr && flag->name == kProgramFlag) return ProgramOnlyAfterDashes(shown);
    if (alias != nullptr) {
      if (!value) {
        if (i + 1 >= arguments.size() || arguments[i + 1].rfind("--", 0) == 0) {
          return Status::InvalidArgument(shown + " needs a value; " + kSeeHelp);
        }
        value = arguments[++i];
      }
      DPL_RETURN_IF_ERROR(RecordAlias(*alias, *value, "", given));
      continue;
    }
    if (flag->value_name.empty()) {
      if (value) return Status::InvalidArgument(shown + " takes no value; " + kSeeHelp);
      value = "true";
    } else if (!value && flag->optional_value) {
      const bool next_is_value = i + 1 < arguments.size() && arguments[i + 1].rfind('-', 0) != 0;
      value = next_is_value ? arguments[++i] : "";
    } else if (!value) {
      if (i + 1 >= arguments.size() || arguments[i + 1].rfind("--", 0) == 0) {
        return Status::InvalidArgument(shown + " needs a value; " + kSeeHelp);
      }
      value = arguments[++i];
    }
    DPL_RETURN_IF_ERROR(Record(*flag, "--" + flag->name, *value, "", given));
  }
  return Status::Ok();
}

// The entries of a config file (config_file.hpp). Flags the command line gave are left as they
// are; a repeatable flag's entries (env = NAME=VALUE) go before the command line's, which win
// where both set one thing.
Status CollectConfigFile(const std::string& path, GivenFlags* given) {
  DPL_ASSIGN_OR_RETURN(std::vector<ConfigEntry> entries, ReadConfigFile(path));
  const GivenFlags from_command_line = *given;
  std::map<std::string, size_t> placed;  // a repeatable flag's entries put before the command's
  for (const ConfigEntry& entry : entries) {
    const std::string place = ConfigPlace(path, entry.line);
    const Flag* flag = FindFlag(entry.name);
    const cluster::FlagAlias* alias = flag ? nullptr : cluster::FindTorchrunAlias(entry.name);
    if (flag == nullptr && alias == nullptr) {
      return Status::InvalidArgument(At(place, UnknownFlag(entry.name, entry.name, "").message()));
    }
    if (alias != nullptr) {
      DPL_RETURN_IF_ERROR(RecordAlias(*alias, entry.value, place, given));
      continue;
    }
    if (flag->name == "config") {
      return Status::InvalidArgument(place + ": a config file cannot name another");
    }
    if (flag->name == kProgramFlag) {
      return Status::InvalidArgument(At(place, ProgramOnlyAfterDashes(entry.name).message()));
    }
    if (from_command_line.count(flag->name) != 0) {
      if (!flag->repeatable) continue;  // the command line wins
      GivenValues& values = (*given)[flag->name];
      const auto at = static_cast<std::ptrdiff_t>(placed[flag->name]++);
      values.values.insert(values.values.begin() + at, entry.value);
      values.places.insert(values.places.begin() + at, place);
      continue;
    }
    DPL_RETURN_IF_ERROR(Record(*flag, flag->name, entry.value, place, given));
  }
  return Status::Ok();
}

// Internal flags belong to workers: refused on a launcher's command line.
Status CheckInternalFlags(const GivenFlags& given) {
  if (given.count(protocol::kWorkerFlag) != 0) return Status::Ok();
  for (const Flag& flag : FlagTable()) {
    if (flag.internal && given.count(flag.name) != 0) {
      return Status::InvalidArgument("--" + flag.name +
                                     " is internal and only valid with --worker");
    }
  }
  return Status::Ok();
}

// What the cluster's environment gives (Note [Cluster defaults]): values by flag name, and the
// environment's own description.
struct ClusterDefaults {
  std::string convention;  // "slurm", "torchrun/kubernetes"
  std::map<std::string, std::string> values;
  std::string description;
  std::optional<cluster::SlurmAllocation> allocation;  // a Slurm allocation outside a job step
  bool requeued = false;  // Note [Slurm requeue] in cluster/environment.cpp
};

Result<ClusterDefaults> ReadClusterDefaults() {
  DPL_ASSIGN_OR_RETURN(auto environment,
                       cluster::ReadClusterEnvironment(cluster::ProcessEnvironment()));
  ClusterDefaults defaults;
  defaults.convention = cluster::ConventionName(environment.convention);
  defaults.description = environment.description;
  defaults.allocation = environment.allocation_outside_step;
  defaults.requeued = environment.requeued;
  auto put = [&](const char* flag, const auto& value) {
    if (value) defaults.values[flag] = std::to_string(*value);
  };
  if (environment.num_machines) {
    defaults.values["num-machines"] =
        (environment.min_machines ? std::to_string(*environment.min_machines) + ":" : "") +
        std::to_string(*environment.num_machines);
  }
  put("machine-id", environment.machine_id);
  put("master-port", environment.master_port);
  put("num-processes", environment.processes_per_machine);
  if (environment.master_addr) defaults.values["master-addr"] = *environment.master_addr;
  if (environment.job_token) defaults.values["job-token"] = *environment.job_token;
  return defaults;
}

// Applies every flag from the first source that has it; says in `overridden` which values of
// the cluster's environment another source replaced ("--machine-id 1 (the command line)").
Status ApplyFlags(const GivenFlags& given, const ClusterDefaults& cluster, ParsedFlags* parsed,
                  std::vector<std::string>* overridden) {
  for (const Flag& flag : FlagTable()) {
    const auto from_cluster = cluster.values.find(flag.name);
    const bool cluster_has_it = from_cluster != cluster.values.end();
    auto found = given.find(flag.name);
    std::optional<std::pair<std::string, std::string>> fallback;
    if (found == given.end() && flag.environment) fallback = flag.environment();
    if (found != given.end()) {
      const GivenValues& values = found->second;
      for (size_t i = 0; i < values.values.size(); ++i) {
        const std::string& place = values.places[i];
        DPL_RETURN_IF_ERROR(flag.apply("--" + flag.name + (place.empty() ? "" : " (" + place + ")"),
                                       values.values[i], parsed));
      }
      if (cluster_has_it && values.values.back() != from_cluster->second) {
        const std::string source =
            values.places.back().empty() ? "the command line" : values.places.back();
        const bool secret = flag.name == "job-token";  // never in a log
        overridden->push_back("--" + flag.name + (secret ? "" : " " + values.values.back()) + " (" +
                              source + ")");
      }
    } else if (fallback) {
      DPL_RETURN_IF_ERROR(flag.apply(fallback->first, fallback->second, parsed));
      if (cluster_has_it && fallback->second != from_cluster->second) {
        overridden->push_back("--" + flag.name + " (" + fallback->first + ")");
      }
    } else if (cluster_has_it) {
      const Status applied =
          flag.apply("--" + flag.name + " (from the " + cluster.convention + " environment)",
                     from_cluster->second, parsed);
      if (!applied.ok()) {
        // Name the variables: a stray RANK or WORLD_SIZE is the usual cause.
        return Status::InvalidArgument(applied.message() +
                                       "; the environment says: " + cluster.description +
                                       " (unset what is left over, or give "
                                       "--" +
                                       flag.name + ")");
      }
    }
  }
  return Status::Ok();
}

// The launcher's first line: what the cluster said, and what won over it.
std::string ClusterLine(const ClusterDefaults& cluster,
                        const std::vector<std::string>& overridden) {
  std::string line = cluster.description;
  if (line.empty() || overridden.empty()) return line;
  line += "; flags win:";
  for (size_t i = 0; i < overridden.size(); ++i) line += (i ? ", " : " ") + overridden[i];
  return line;
}

// The launcher's first line in a Slurm allocation of several nodes outside a job step, when the
// job is this machine alone: that, and the srun command that starts one launcher per node with
// `command`, this one's own (Note [Slurm environment] in cluster/environment.cpp).
std::string FirstLine(const ClusterDefaults& cluster, const std::vector<std::string>& overridden,
                      const Options& options, const std::vector<std::string>& command) {
  const std::string line = ClusterLine(cluster, overridden);
  if (!cluster.allocation || cluster.allocation->nodes < 2 || options.num_machines > 1) return line;
  const std::string allocation = cluster::SlurmAllocationLine(*cluster.allocation, command);
  return cluster.convention == cluster::ConventionName(cluster::Convention::kNone)
             ? allocation
             : allocation + "; " + line;
}

Command CommandOf(const ParsedFlags& parsed, bool plugins_subcommand) {
  if (parsed.help) return Command::kHelp;
  if (parsed.version) return Command::kVersion;
  if (plugins_subcommand) return Command::kPlugins;
  if (parsed.worker) return Command::kWorker;
  if (parsed.selftest) return Command::kSelftest;
  return Command::kTrain;
}

}  // namespace

Result<Options> ParseCommandLine(int argc, const char* const* argv) {
  std::vector<std::string> arguments(argv + std::min(argc, 1), argv + argc);
  const bool plugins_subcommand = !arguments.empty() && arguments.front() == "plugins";
  if (plugins_subcommand) arguments.erase(arguments.begin());

  GivenFlags given;
  DPL_RETURN_IF_ERROR(CollectCommandLine(arguments, &given));
  if (auto config = given.find("config"); config != given.end()) {
    DPL_RETURN_IF_ERROR(CollectConfigFile(config->second.values.front(), &given));
  }
  DPL_RETURN_IF_ERROR(CheckInternalFlags(given));
  const bool launcher = !plugins_subcommand && given.count(protocol::kWorkerFlag) == 0 &&
                        given.count("help") == 0 && given.count("version") == 0;
  Result<ClusterDefaults> cluster_read = launcher ? ReadClusterDefaults() : ClusterDefaults{};
  const ClusterDefaults cluster = cluster_read.ok() ? *cluster_read : ClusterDefaults{};
  ParsedFlags parsed;
  std::vector<std::string> overridden;
  DPL_RETURN_IF_ERROR(ApplyFlags(given, cluster, &parsed, &overridden));
  // A bad value a flag's own source gave is reported before one of the cluster's environment.
  if (!cluster_read.ok()) return cluster_read.status();
  Options options = std::move(parsed.options);
  options.command = CommandOf(parsed, plugins_subcommand);
  options.help_section = parsed.help_section;
  options.cluster_environment =
      FirstLine(cluster, overridden, options, std::vector<std::string>(argv, argv + argc));
  if (cluster.requeued && !options.training.checkpoint_dir.empty()) options.training.resume = true;
  for (const auto& entry : given) options.given_flags.push_back(entry.first);
  if (auto config = given.find("config"); config != given.end()) {
    options.config_file = config->second.values.front();
  }
  // The recipe's rate is Adadelta's; Adam's and AdamW's is torch.optim's (0.5 diverges there).
  auto& optimizer = options.training.optimizer;
  if (!options.Given("lr") && (optimizer.kind == training::OptimizerKind::kAdam ||
                               optimizer.kind == training::OptimizerKind::kAdamW)) {
    optimizer.learning_rate = training::kDefaultAdamLearningRate;
  }
  // One machine needs no join order to know it is machine 0.
  if (options.machine_id == kAutoMachineId && options.num_machines == 1) options.machine_id = 0;
  // A worker of a selftest job has the role kWorker; the job kind travels in selftest_job.
  options.selftest_job = parsed.selftest;
  DPL_RETURN_IF_ERROR(CheckConsistency(options));
  options.training.resume_settings = ResumeSettings(options);
  return options;
}

bool Options::Given(const std::string& flag) const {
  return std::find(given_flags.begin(), given_flags.end(), flag) != given_flags.end();
}

std::vector<std::string> LauncherArguments(const Options& options) {
  std::vector<std::string> arguments;
  for (const Flag& flag : FlagTable()) {
    for (auto& argument : flag.forward(options)) arguments.push_back(std::move(argument));
  }
  return arguments;
}

int ThreadsPerWorker(const Options& options) {
  if (options.threads_per_worker > 0) return options.threads_per_worker;
  const unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores) / std::max(1, options.num_processes));
}

}  // namespace dpl::cli
