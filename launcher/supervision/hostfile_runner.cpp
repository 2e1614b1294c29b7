#include "supervision/hostfile_runner.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "cluster/forwarded_environment.hpp"
#include "cluster/hostfile.hpp"
#include "cluster/machine_ids.hpp"
#include "cluster/remote_command.hpp"
#include "common/log.hpp"
#include "protocol/program_environment.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/line_relay.hpp"
#include "supervision/stop_signals.hpp"
#include "supervision/worker_environment.hpp"

extern char** environ;

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A stopped machine's launcher stops its workers within their grace period; then it has this
// long more before it is killed.
constexpr auto kMachineStopGrace = cli::kDefaultStopGracePeriod + 5s;
constexpr int kTokenBytes = 16;

// One machine of the hostfile and the process that runs its launcher: the launcher itself for
// this machine, ssh for another.
struct Machine {
  int id = 0;
  std::string host;
  bool remote = false;
  std::vector<std::string> argv;
  pid_t pid = -1;
  int input_fd = -1;  // its stdin: the job token and the environment, then held open until it stops
  bool exited = false;
  int wait_status = 0;

  bool Succeeded() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
  std::string Label() const { return "machine " + std::to_string(id) + " (" + host + ")"; }
  // How it ended: a remote launcher's status comes through ssh (cluster::DescribeSshExit).
  std::string Ending() const {
    if (remote && WIFEXITED(wait_status)) return cluster::DescribeSshExit(WEXITSTATUS(wait_status));
    return DescribeExit(wait_status);
  }
};

Result<std::string> RandomToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[kTokenBytes];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof bytes)) {
    return Status::Io("cannot read /dev/urandom for the job token; give --job-token");
  }
  std::string token;
  char hex[3];
  for (unsigned char byte : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", byte);
    token += hex;
  }
  return token;
}

Result<std::string> OwnBinary() {
  char path[PATH_MAX] = {};
  const ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0)
    return Status::Io(std::string("cannot find the launcher's path: ") + strerror(errno));
  return std::string(path, static_cast<size_t>(length));
}

Result<std::string> WorkingDirectory() {
  char path[PATH_MAX] = {};
  if (getcwd(path, sizeof path) == nullptr) {
    return Status::Io(std::string("cannot read the working directory: ") + strerror(errno));
  }
  return std::string(path);
}

// The job's shape from the hostfile, checked against the flags that were given.
Status CheckHostfileShape(const cli::Options& options,
                          const std::vector<cluster::HostSlots>& hosts) {
  const std::string file = "hostfile '" + options.hostfile + "'";
  for (const cluster::HostSlots& host : hosts) {
    if (host.slots != hosts.front().slots) {
      return Status::InvalidArgument(file + " gives " + hosts.front().host +
                                     " slots=" + std::to_string(hosts.front().slots) + " but " +
                                     host.host + " slots=" + std::to_string(host.slots) +
                                     ": every machine of a job runs the same number of processes");
    }
  }
  if (options.Given("num-processes") && options.num_processes != hosts.front().slots) {
    return Status::InvalidArgument(
        "--num-processes " + std::to_string(options.num_processes) + " differs from the slots=" +
        std::to_string(hosts.front().slots) + " of " + file + "; leave --num-processes out");
  }
  if (options.Given("num-machines") && options.num_machines != static_cast<int>(hosts.size())) {
    return Status::InvalidArgument("--num-machines " + std::to_string(options.num_machines) +
                                   " differs from the " + std::to_string(hosts.size()) +
                                   " hosts of " + file + "; leave --num-machines out");
  }
  if (options.master_port == 0) {
    return Status::InvalidArgument(
        "--hostfile needs a fixed --master-port (not 0): the other machines must know where "
        "machine 0's store listens");
  }
  return Status::Ok();
}

// Every machine's command line, machine i on the i-th host. A remote one reads the variables of
// `forwarded` from its standard input when there are some (Note [Forwarded environment]).
Result<std::vector<Machine>> PlanMachines(const cli::Options& options,
                                          const cluster::ForwardedEnvironment& forwarded) {
  DPL_ASSIGN_OR_RETURN(auto hosts, cluster::ReadHostfile(options.hostfile));
  DPL_RETURN_IF_ERROR(CheckHostfileShape(options, hosts));
  DPL_ASSIGN_OR_RETURN(auto binary, OwnBinary());
  DPL_ASSIGN_OR_RETURN(auto directory, WorkingDirectory());
  DPL_ASSIGN_OR_RETURN(auto ssh_options, cluster::SplitSshOptions(options.ssh_options));
  cli::Options machine_options = options;
  machine_options.hostfile.clear();
  machine_options.no_flag_warnings = true;  // RunLauncher warned here, of the flags given
  // One clock stamps every machine's lines: this runner's, as it relays them PrintLine.
  machine_options.log_time = log::TimeFormat::kNone;
  machine_options.num_machines = machine_options.min_machines = static_cast<int>(hosts.size());
  machine_options.num_processes = hosts.front().slots;
  if (!options.Given("master-addr")) machine_options.master_addr = hosts.front().host;
  std::vector<Machine> machines;
  for (size_t i = 0; i < hosts.size(); ++i) {
    Machine machine;
    machine.id = static_cast<int>(i);
    machine.host = hosts[i].host;
    auto local = cluster::IsLocalAddress(machine.host);
    if (!local.ok()) return local.status().WithContext("hostfile '" + options.hostfile + "'");
    machine.remote = !*local;
    machine_options.machine_id = machine.id;
    std::vector<std::string> arguments = cli::LauncherArguments(machine_options);
    if (machine.remote) {
      // First: a program's words end the arguments.
      arguments.insert(arguments.begin(), "--exit-with-stdin");
      machine.argv = cluster::SshArguments({machine.host, directory, binary, std::move(arguments),
                                            ssh_options, !forwarded.entries.empty()});
    } else {
      machine.argv = {binary};
      machine.argv.insert(machine.argv.end(), arguments.begin(), arguments.end());
    }
    machines.push_back(std::move(machine));
  }
  return machines;
}

// This host's environment, NAME=value entries.
std::vector<std::string> HostEnvironment() {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) environment.push_back(*entry);
  return environment;
}

// The environment of a machine started here: this one's with the variables of --env, and the
// job's token.
std::vector<std::string> LocalEnvironment(const std::string& token,
                                          const std::vector<std::string>& given) {
  std::vector<std::string> environment;
  const std::string token_entry = std::string(kJobTokenEnv) + "=";
  for (const std::string& entry : HostEnvironment()) {
    const std::string name = entry.substr(0, entry.find('='));
    if (entry.rfind(token_entry, 0) != 0 && protocol::FindVariable(given, name) == nullptr) {
      environment.push_back(entry);
    }
  }
  environment.insert(environment.end(), given.begin(), given.end());
  environment.push_back(token_entry + token);
  return environment;
}

// What a machine reads on its standard input: the job token's line, then for a remote one the
// variables it exports (Note [Forwarded environment]).
struct MachineInput {
  std::string token;
  std::vector<std::string> given;  // --env, for a machine started here
  std::string remote_lines;        // the token's line and EnvironmentLines, for ssh
};

void PrintLine(const Machine& machine, const std::string& line) {
  log::WriteLine("[" + machine.host + "] " + line);
}

// Starts `machine`: its stdout and stderr into one pipe, relayed by `relay`, its stdin from
// another (a remote one reads the token and the variables from it; a local one gets both in its
// environment).
Status Start(Machine& machine, const MachineInput& input_text, LineRelay& relay) {
  int output[2], input[2];
  if (pipe2(output, O_CLOEXEC) != 0) return Status::Error(std::string("pipe: ") + strerror(errno));
  if (pipe2(input, O_CLOEXEC) != 0) {
    close(output[0]);
    close(output[1]);
    return Status::Error(std::string("pipe: ") + strerror(errno));
  }
  std::vector<std::string> environment_text = LocalEnvironment(input_text.token, input_text.given);
  std::vector<char*> argv, envp;
  for (auto& argument : machine.argv) argv.push_back(argument.data());
  argv.push_back(nullptr);
  for (auto& entry : environment_text) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(input[0], STDIN_FILENO);
    dup2(output[1], STDOUT_FILENO);
    dup2(output[1], STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (machine.remote) {
      execvp(argv[0], argv.data());
    } else {
      execve(argv[0], argv.data(), envp.data());
    }
    _exit(127);
  }
  close(output[1]);
  close(input[0]);
  if (pid < 0) {
    close(output[0]);
    close(input[1]);
    return Status::Error(std::string("cannot start a process (fork): ") + strerror(errno));
  }
  machine.pid = pid;
  relay.Add(output[0], [&machine](std::string line) { PrintLine(machine, line); });
  machine.input_fd = input[1];
  if (machine.remote) {
    const std::string& lines = input_text.remote_lines;
    if (write(machine.input_fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
      return Status::Error("cannot pass the job token to ssh for " + machine.host);
    }
  } else {
    close(machine.input_fd);
    machine.input_fd = -1;
  }
  return Status::Ok();
}

// Relays what the machines wrote, each line prefixed with its host, for up to `timeout_ms`.
void PumpOutput(LineRelay& relay, int timeout_ms) {
  if (!relay.Pump(std::chrono::milliseconds(timeout_ms)) && timeout_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  }
}

// Reaps every machine that ended; returns the first of them that failed, if any.
Machine* ReapExited(std::vector<Machine>& machines) {
  Machine* failed = nullptr;
  for (Machine& machine : machines) {
    if (machine.exited) continue;
    int status = 0;
    if (waitpid(machine.pid, &status, WNOHANG) != machine.pid) continue;
    machine.exited = true;
    machine.wait_status = status;
    if (machine.input_fd >= 0) close(machine.input_fd);
    machine.input_fd = -1;
    const std::string line = machine.Label() + " ended: " + machine.Ending();
    if (machine.Succeeded()) {
      log::Info(line);
    } else {
      log::Error(line);
      if (failed == nullptr) failed = &machine;
    }
  }
  return failed;
}

bool AllExited(const std::vector<Machine>& machines) {
  for (const Machine& machine : machines) {
    if (!machine.exited) return false;
  }
  return true;
}

// Stops every machine still running: a remote one sees its standard input close (its launcher
// runs with --exit-with-stdin) and stops its workers; a local one gets SIGINT, which stops it at
// once (SIGTERM would ask a run with checkpoints for a preemption: Note [Stop and preemption
// signals]). Whatever still runs after kMachineStopGrace is killed.
void StopAll(std::vector<Machine>& machines, LineRelay& relay) {
  for (Machine& machine : machines) {
    if (machine.exited) continue;
    if (machine.input_fd >= 0) close(machine.input_fd);
    machine.input_fd = -1;
    if (!machine.remote && machine.pid > 0) kill(machine.pid, SIGINT);
  }
  const auto deadline = Clock::now() + kMachineStopGrace;
  while (!AllExited(machines) && Clock::now() < deadline) {
    PumpOutput(relay, 50);
    ReapExited(machines);
  }
  for (Machine& machine : machines) {
    if (!machine.exited && machine.pid > 0) kill(machine.pid, SIGKILL);
  }
  while (!AllExited(machines)) {
    PumpOutput(relay, 50);
    ReapExited(machines);
  }
}

// Relays what the machines wrote before they ended, until every output closed.
void DrainOutput(LineRelay& relay) {
  const auto deadline = Clock::now() + 2s;
  while (relay.AnyOpen() && Clock::now() < deadline) PumpOutput(relay, 50);
}

std::string Overview(const std::vector<Machine>& machines) {
  std::string text;
  for (const Machine& machine : machines) {
    text += (text.empty() ? "" : ", ") + machine.Label() + (machine.remote ? " over ssh" : " here");
  }
  return text;
}

}  // namespace

// The job's token (made here unless given) and what the machines read of it and the environment;
// says which variables go to the other hosts (their names, never their values).
Result<MachineInput> PrepareInput(const cli::Options& options,
                                  const cluster::ForwardedEnvironment& forwarded,
                                  const std::vector<Machine>& machines) {
  DPL_ASSIGN_OR_RETURN(auto token, options.job_token.empty()
                                       ? RandomToken()
                                       : Result<std::string>(options.job_token));
  MachineInput input{token, options.environment, token + "\n"};
  if (!forwarded.entries.empty())
    input.remote_lines += cluster::EnvironmentLines(forwarded.entries);
  const bool any_remote =
      std::any_of(machines.begin(), machines.end(), [](const Machine& m) { return m.remote; });
  if (!any_remote) return input;
  if (!forwarded.entries.empty()) {
    log::Info("passing " + cluster::VariableNames(forwarded.entries) +
              " to the other hosts (on ssh's standard input)");
  }
  if (!forwarded.left_out.empty()) {
    std::string names;
    for (const std::string& name : forwarded.left_out) names += (names.empty() ? "" : ", ") + name;
    log::Warning("not passing " + names +
                 " to the other hosts: a value with a line break, or a name a shell cannot take");
  }
  return input;
}

int RunHostfile(const cli::Options& options) {
  log::SetPrefix("[hostfile]");
  const cluster::ForwardedEnvironment forwarded =
      cluster::SelectForwarded(HostEnvironment(), options.environment);
  auto planned = PlanMachines(options, forwarded);
  auto input = planned.ok() ? PrepareInput(options, forwarded, *planned)
                            : Result<MachineInput>(planned.status());
  if (!input.ok()) {
    log::Error(input.status().message());
    return 1;
  }
  std::vector<Machine> machines = std::move(*planned);
  InstallStopHandlers(OnTermination::kStop);
  log::Info("starting " + std::to_string(machines.size()) + " machines: " + Overview(machines));
  std::string failure;
  LineRelay relay;  // after `machines`, whose entries its line handlers name
  for (Machine& machine : machines) {
    Status started = failure.empty() ? Start(machine, *input, relay) : Status::Ok();
    if (machine.pid < 0) machine.exited = true;  // never started: nothing to wait for
    if (!started.ok()) failure = machine.Label() + ": " + started.message();
  }
  while (failure.empty() && !AllExited(machines)) {
    PumpOutput(relay, 100);
    if (Machine* failed = ReapExited(machines)) {
      failure = failed->Label() + " failed first: " + failed->Ending();
    } else if (StopSignal() != 0) {
      failure = "stopped by signal " + SignalName(StopSignal());
    }
  }
  if (!failure.empty()) {
    log::Error(failure + "; stopping every machine");
    StopAll(machines, relay);
    DrainOutput(relay);
    log::Error("job failed: " + failure);
    return 1;
  }
  DrainOutput(relay);
  log::Info("all " + std::to_string(machines.size()) + " machines finished");
  return 0;
}

}  // namespace dpl::supervision
