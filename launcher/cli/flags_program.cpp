// The flag table's rows for a program's job and for what every worker gets from its launcher:
// the program after `--` (Note [A program's workers] in protocol/program_environment.hpp), the
// variables given with --env, and the ranks whose output reaches the console (flags.hpp).
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flag_kinds.hpp"
#include "cluster/remote_command.hpp"
#include "protocol/program_environment.hpp"

namespace dpl::cli::table {
namespace {

constexpr int64_t kMaxRank = 1024 * 1024 - 1;  // --num-machines x --num-processes at most

bool IsVariableName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool word =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!word) return false;
  }
  return true;
}

// Why the launcher, not --env, sets `name` for the workers; "" when --env may set it.
std::string SetByTheLauncher(const std::string& name) {
  if (name == "DPL_JOB_TOKEN") return "give the job's token with --job-token or DPL_JOB_TOKEN";
  if (name == "OMP_NUM_THREADS") return "the launcher sets it from --threads-per-worker";
  if (protocol::IsTorchrunWorkerVariable(name) || name.rfind("TORCHELASTIC_", 0) == 0 ||
      name == "DPL_ATTEMPT") {
    return "the launcher sets it for each worker";
  }
  return "";
}

// --env NAME=VALUE, or NAME alone for this host's value: one NAME=VALUE entry.
Status ApplyEnvironment(const std::string& label, const std::string& text, ParsedFlags* parsed) {
  const size_t equals = text.find('=');
  const std::string name = text.substr(0, equals);
  if (!IsVariableName(name)) {
    return Status::InvalidArgument(label + " '" + text +
                                   "': give NAME or NAME=VALUE, NAME of letters, digits and _ "
                                   "(not first a digit)");
  }
  const std::string why = SetByTheLauncher(name);
  if (!why.empty()) return Status::InvalidArgument(label + " " + name + ": " + why);
  std::string value;
  if (equals != std::string::npos) {
    value = text.substr(equals + 1);
  } else if (const char* here = std::getenv(name.c_str())) {
    value = here;
  } else {
    return Status::InvalidArgument(label + " " + name + ": " + name +
                                   " is not set here; set it, or give " + label + " " + name +
                                   "=VALUE");
  }
  if (value.find('\n') != std::string::npos) {
    return Status::InvalidArgument(label + " " + name +
                                   ": the value holds a line break, which cannot be passed on");
  }
  // The last value of a name wins (a program's getenv would read the first of two entries).
  auto& environment = parsed->options.environment;
  environment.erase(std::remove_if(environment.begin(), environment.end(),
                                   [&](const std::string& entry) {
                                     return entry.compare(0, name.size() + 1, name + "=") == 0;
                                   }),
                    environment.end());
  environment.push_back(name + "=" + value);
  return Status::Ok();
}

Flag Environment() {
  Flag flag = NotForwarded(Base("env", "NAME[=VALUE]"));
  flag.repeatable = true;
  flag.apply = ApplyEnvironment;
  return flag;
}

// --log-ranks all|N[,N..].
Flag LogRanks() {
  Flag flag = Text("log-ranks", "all|N,..", EmptyText::kRefused, In<&Options::log_ranks>);
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (text != "all") {
      size_t start = 0;
      for (;;) {
        const size_t comma = text.find(',', start);
        int64_t rank = 0;
        DPL_RETURN_IF_ERROR(ParseInteger(label + " (all, or ranks apart by commas)",
                                         text.substr(start, comma - start), 0, kMaxRank, &rank));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    parsed->options.log_ranks = text;
    return Status::Ok();
  };
  return flag;
}

// The words after `--` (cli/options.cpp collects them), one value each.
Flag Program() {
  Flag flag = Base(kProgramFlag, "PROGRAM [ARGS...]");
  flag.repeatable = true;
  flag.apply = [](const std::string& label, const std::string& text, ParsedFlags* parsed) {
    if (parsed->options.program.empty() && text.empty()) {
      return Status::InvalidArgument(label + ": the program's name is empty");
    }
    parsed->options.program.push_back(text);
    return Status::Ok();
  };
  flag.forward = [](const Options& o) {
    std::vector<std::string> words;
    if (o.program.empty()) return words;
    words.push_back("--");
    words.insert(words.end(), o.program.begin(), o.program.end());
    return words;
  };
  // As a shell would take the words, so that "a b" and "a" "b" differ.
  flag.compared_value = [](const Options& o) {
    std::string text;
    for (const std::string& word : o.program) {
      text += (text.empty() ? "" : " ") + cluster::ShellQuote(word);
    }
    return text.empty() ? std::string("(none)") : text;
  };
  return flag;
}

}  // namespace

void AddProgramFlags(TableRows add) {
  add(Section::kOutputs, MayDiffer("this machine's console"), LogRanks(),
      "the ranks whose output reaches the console, all or a list (0,3); the others' is kept in "
      "--log-dir and named when they fail (default: every rank of a program, rank 0 of the "
      "built-in loop, whose other ranks show their warnings and errors)");
  add(Section::kJob,
      MayDiffer("each machine's environment; --hostfile passes this host's to the others"),
      Environment(),
      "give every worker NAME=VALUE, or NAME with this host's value (repeatable); --hostfile "
      "passes these, and every variable named NCCL_*, DPL_*, OMP_*, CUDA_*, PYTHON* or TORCH_*, "
      "to the other hosts on ssh's standard input, never in a command line");
  // Last in the table: its words end every command line of the job (LauncherArguments).
  add(Section::kJob,
      SameOnEveryMachine("a program keeps its own checkpoints; dpl only starts it again"),
      Program(),
      "run PROGRAM as the workers, in place of the built-in training loop: once per rank, with "
      "torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...)");
}

// " (...)" for a stray word that looks like a script: torchrun takes it without `--`.
std::string ProgramHint(const std::string& argument) {
  const bool script = argument.size() > 3 && argument.compare(argument.size() - 3, 3, ".py") == 0;
  return script ? "; to run it as the workers, put it after `--`: launcher [flags] -- python3 " +
                      argument
                : "";
}

// The ranks of --log-ranks exist in the job.
Status CheckLogRanks(const Options& options) {
  if (options.log_ranks.empty() || options.log_ranks == "all") return Status::Ok();
  const int64_t world_size = int64_t{options.num_machines} * options.num_processes;
  std::istringstream list(options.log_ranks);
  for (std::string item; std::getline(list, item, ',');) {
    if (std::stoll(item) >= world_size) {
      return Status::InvalidArgument("--log-ranks " + options.log_ranks + ": rank " + item +
                                     " is not in the job, whose ranks are 0.." +
                                     std::to_string(world_size - 1));
    }
  }
  return Status::Ok();
}

// A program's job (Note [A program's workers]): the program splits no batch of dpl's and keeps
// its own checkpoints, so neither is checked; a self-test runs no program.
Status CheckProgramJob(const Options& options) {
  if (options.selftest_job) {
    return Status::InvalidArgument(
        "--selftest checks the rendezvous and a backend without a program; leave out either "
        "--selftest or the program after --");
  }
  return Status::Ok();
}

}  // namespace dpl::cli::table

namespace dpl::cli {

bool LogsRank(const Options& options, int rank) {
  if (options.log_ranks.empty()) return options.runs_program() || rank == 0;
  if (options.log_ranks == "all") return true;
  std::istringstream list(options.log_ranks);
  for (std::string item; std::getline(list, item, ',');) {
    if (std::stoll(item) == rank) return true;
  }
  return false;
}

}  // namespace dpl::cli
