// The supervisor's start of a program's workers (Note [A program's workers] in
// protocol/program_environment.hpp): where rank 0 serves torch's store (program_master.hpp), each
// rank's environment, then PROGRAM once per rank (program_spawn.hpp). The rest of the attempt is
// the supervisor's loop, as for the built-in workers.
#include <string>
#include <vector>

#include "cluster/remote_command.hpp"
#include "common/log.hpp"
#include "protocol/program_environment.hpp"
#include "supervision/program_master.hpp"
#include "supervision/program_spawn.hpp"
#include "supervision/supervisor.hpp"
#include "supervision/worker_environment.hpp"

extern char** environ;

namespace dpl::supervision {
namespace {

// The launcher's environment without what is dpl's alone: the job token, the attempt number.
std::vector<std::string> InheritedEnvironment() {
  std::vector<std::string> inherited;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    if (name != kJobTokenEnv && name != kAttemptEnvironmentVariable) inherited.push_back(text);
  }
  return inherited;
}

std::string CommandText(const std::vector<std::string>& program) {
  std::string text;
  for (const std::string& word : program)
    text += (text.empty() ? "" : " ") + cluster::ShellQuote(word);
  return text;
}

}  // namespace

Result<SpawnedWorkers> Supervisor::StartProgram() {
  DPL_ASSIGN_OR_RETURN(ProgramMaster master,
                       shape_.machine_id == 0
                           ? PublishProgramMaster(client_, prefix_, options_.master_addr)
                           : ReadProgramMaster(client_, prefix_, options_.rendezvous_timeout));
  protocol::ProgramWorkerPlace place;
  place.machine = shape_.machine_id;
  place.num_machines = shape_.num_machines;
  place.processes_per_machine = shape_.num_processes;
  place.master_addr = master.addr;
  place.master_port = master.port;
  place.restart_count = attempt_;
  place.max_restarts = options_.max_restarts;
  place.run_id = master.run_id;
  place.threads = cli::ThreadsPerWorker(options_);
  const std::vector<std::string> inherited = InheritedEnvironment();
  ProgramLaunch launch;
  launch.argv = options_.program;
  for (int local = 0; local < shape_.num_processes; ++local) {
    place.local_rank = local;
    place.rank = shape_.RankOf(local);
    launch.environments.push_back(
        protocol::ProgramEnvironment(inherited, options_.environment, place));
  }
  Result<SpawnedWorkers> spawned = SpawnProgram(launch);
  if (!spawned.ok()) return spawned;
  const int first = shape_.RankOf(0), last = shape_.RankOf(shape_.num_processes - 1);
  log::Info("started " + CommandText(options_.program) + " as rank" +
            (first == last ? " " + std::to_string(first)
                           : "s " + std::to_string(first) + ".." + std::to_string(last)) +
            " of " + std::to_string(shape_.world_size()) + "; rank 0 serves torch's store at " +
            master.addr + ":" + std::to_string(master.port) + " (MASTER_ADDR, MASTER_PORT)");
  return spawned;
}

}  // namespace dpl::supervision
