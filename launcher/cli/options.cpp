// Command-line parsing for the launcher, driven by the flag table (cli/flags.cpp).
//
// Precedence, first wins: the command line, then --config FILE, then the environment defaults a
// flag names (MASTER_ADDR, ...), then the built-in defaults of Options. Flag names may be spelled
// with '-' or '_' (`num_processes = 2`), and an unknown name is answered with the closest known
// one. Values are applied in table order, so a range that depends on another flag sees it.
#include "cli/options.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/flags.hpp"

namespace dpl::cli {
namespace {

constexpr const char* kSeeHelp = "see launcher --help";
constexpr size_t kHelpLineLength = 100;
constexpr size_t kHelpFlagColumn = 34;

// The values a flag was given, and where (for messages: "" or " in config file F").
struct GivenValues {
  std::vector<std::string> values;
  std::string source;
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

Status UnknownFlag(const std::string& shown, const std::string& name, const std::string& dashes,
                   const std::string& source) {
  return Status::InvalidArgument("unknown flag " + shown + source + DidYouMean(name, dashes) +
                                 "; " + kSeeHelp);
}

Status Record(const Flag& flag, const std::string& shown, std::string value,
              const std::string& source, GivenFlags* given) {
  GivenValues& entry = (*given)[flag.name];
  if (!entry.values.empty() && !flag.repeatable) {
    return Status::InvalidArgument(shown + " was given more than once" + source + "; give it once");
  }
  entry.values.push_back(std::move(value));
  entry.source = source;
  return Status::Ok();
}

Status CollectCommandLine(const std::vector<std::string>& arguments, GivenFlags* given) {
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument.rfind("--", 0) != 0 && argument != "-h") {
      return Status::InvalidArgument("unexpected argument '" + argument +
                                     "' (the only subcommand is `plugins`, given first); " +
                                     kSeeHelp);
    }
    std::string name = argument == "-h" ? "help" : argument.substr(2);
    std::optional<std::string> value;
    if (const auto equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name.resize(equals);
    }
    const Flag* flag = FindFlag(name);
    const std::string shown = "--" + name;
    if (flag == nullptr) return UnknownFlag(shown, name, "--", "");
    if (flag->value_name.empty()) {
      if (value) return Status::InvalidArgument(shown + " takes no value; " + kSeeHelp);
      value = "true";
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

std::string Trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t\r") - first + 1);
}

// `name = value` lines; '#' starts a comment. Flags the command line gave are left as they are.
Status CollectConfigFile(const std::string& path, GivenFlags* given) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return Status::InvalidArgument("--config: '" + path +
                                   "' is a folder; pass a file of `name = value` lines");
  }
  std::ifstream file(path);
  if (!file) {
    return Status::InvalidArgument("--config: cannot open '" + path + "' (" + std::strerror(errno) +
                                   ")");
  }
  const std::string source = " in config file " + path;
  const GivenFlags from_command_line = *given;
  for (std::string line; std::getline(file, line);) {
    line = Trimmed(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const auto equals = line.find('=');
    const std::string name = Trimmed(line.substr(0, equals));
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) return UnknownFlag(name, name, "", source);
    if (equals == std::string::npos) {
      return Status::InvalidArgument("'" + line + "'" + source + " is not `name = value`");
    }
    if (flag->name == "config") {
      return Status::InvalidArgument("config" + source + ": a config file cannot name another");
    }
    if (from_command_line.count(flag->name) != 0) continue;  // the command line wins
    DPL_RETURN_IF_ERROR(Record(*flag, flag->name, Trimmed(line.substr(equals + 1)), source, given));
  }
  return Status::Ok();
}

// Internal flags belong to workers: refused on a launcher's command line.
Status CheckInternalFlags(const GivenFlags& given) {
  if (given.count("worker") != 0) return Status::Ok();
  for (const Flag& flag : FlagTable()) {
    if (flag.internal && given.count(flag.name) != 0) {
      return Status::InvalidArgument("--" + flag.name +
                                     " is internal and only valid with --worker");
    }
  }
  return Status::Ok();
}

Status ApplyFlags(const GivenFlags& given, ParsedFlags* parsed) {
  for (const Flag& flag : FlagTable()) {
    auto found = given.find(flag.name);
    if (found != given.end()) {
      for (const std::string& value : found->second.values) {
        DPL_RETURN_IF_ERROR(flag.apply("--" + flag.name, value, parsed));
      }
    } else if (flag.environment) {
      if (auto fallback = flag.environment()) {
        DPL_RETURN_IF_ERROR(flag.apply(fallback->first, fallback->second, parsed));
      }
    }
  }
  return Status::Ok();
}

// Checks that involve more than one flag.
Status CheckConsistency(const Options& options) {
  const int world_size = options.num_processes * options.num_machines;
  if (options.training.batch_size % world_size != 0) {
    return Status::InvalidArgument("--batch-size " + std::to_string(options.training.batch_size) +
                                   " is not divisible by the world size " +
                                   std::to_string(world_size) + " (--num-processes " +
                                   std::to_string(options.num_processes) + " x --num-machines " +
                                   std::to_string(options.num_machines) +
                                   "); the global batch is split evenly across workers");
  }
  if (options.command != Command::kWorker) return Status::Ok();
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

Command CommandOf(const ParsedFlags& parsed, bool plugins_subcommand) {
  if (parsed.help) return Command::kHelp;
  if (parsed.version) return Command::kVersion;
  if (plugins_subcommand) return Command::kPlugins;
  if (parsed.worker) return Command::kWorker;
  if (parsed.selftest) return Command::kSelftest;
  return Command::kTrain;
}

// Appends `text` to `out` wrapped at kHelpLineLength, continuation lines indented to `column`.
void AppendWrapped(const std::string& text, size_t column, size_t used, std::string* out) {
  std::istringstream words(text);
  size_t position = used;
  for (std::string word; words >> word;) {
    if (position > column && position + 1 + word.size() > kHelpLineLength) {
      *out += "\n" + std::string(column, ' ');
      position = column;
    } else if (position > column) {
      *out += " ";
      ++position;
    }
    *out += word;
    position += word.size();
  }
  *out += "\n";
}

std::vector<std::string> Concatenated(std::vector<std::string> head, const Options& options) {
  for (const Flag& flag : FlagTable()) {
    for (auto& argument : flag.forward(options)) head.push_back(std::move(argument));
  }
  return head;
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
  ParsedFlags parsed;
  DPL_RETURN_IF_ERROR(ApplyFlags(given, &parsed));
  Options options = std::move(parsed.options);
  options.command = CommandOf(parsed, plugins_subcommand);
  // A worker of a selftest job has the role kWorker; the job kind travels in selftest_job.
  options.selftest_job = parsed.selftest;
  DPL_RETURN_IF_ERROR(CheckConsistency(options));
  return options;
}

std::string HelpText() {
  std::string text =
      "usage: launcher [options]            train (the default)\n"
      "       launcher --selftest [options]  check rendezvous and the backend, no training\n"
      "       launcher plugins [--plugin-dir DIR]...  list the plugins found\n\n"
      "Every option may also be set in a --config file as `name = value` (names with - or _).\n"
      "Environment defaults: MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN; plugins are also\n"
      "searched in DPL_PLUGIN_PATH (colon-separated).\n\n"
      "Options:\n";
  for (const Flag& flag : FlagTable()) {
    if (flag.internal) continue;
    std::string head = "  --" + flag.name;
    if (flag.name == "help") head = "  -h [ --help ]";
    if (!flag.value_name.empty()) head += " " + flag.value_name;
    text += head;
    if (head.size() + 1 >= kHelpFlagColumn) {
      text += "\n" + std::string(kHelpFlagColumn, ' ');
    } else {
      text += std::string(kHelpFlagColumn - head.size(), ' ');
    }
    AppendWrapped(flag.help, kHelpFlagColumn, kHelpFlagColumn, &text);
  }
  return text;
}

std::vector<std::string> WorkerArguments(const Options& options, int local_rank,
                                         const std::string& store_addr) {
  return Concatenated(
      {"--worker", "--local-rank", std::to_string(local_rank), "--store-addr", store_addr},
      options);
}

std::vector<std::string> WorkerLoaderArguments(const Options& options,
                                               const std::vector<int>& output_fds,
                                               const std::string& store_addr) {
  std::string list;
  for (int fd : output_fds) list += (list.empty() ? "" : ",") + std::to_string(fd);
  return Concatenated({"--worker", "--worker-outputs", list, "--store-addr", store_addr}, options);
}

}  // namespace dpl::cli
