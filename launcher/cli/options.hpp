// Every flag of the launcher, from the command line, a config file (--config FILE, the same names
// without dashes: `epochs = 2`) and environment defaults (MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN,
// then what a Slurm step or a torchrun/Kubernetes environment says of the job: Note [Cluster
// defaults] in options.cpp; plugins also come from DPL_PLUGIN_PATH). torchrun's flag names
// (--nnodes, --node-rank, --nproc-per-node, --rdzv-endpoint) are taken as aliases. The flags
// themselves, their ranges, help and how a worker receives them, are one table: cli/flags.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/log.hpp"
#include "common/status.hpp"
#include "training/config.hpp"

namespace dpl::cli {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr std::chrono::seconds kDefaultRendezvousTimeout{300};
inline constexpr std::chrono::seconds kDefaultBackendTimeout{300};
inline constexpr std::chrono::seconds kDefaultStopGracePeriod{5};
inline constexpr std::chrono::seconds kDefaultJoinGrace{5};
// --machine-id auto: machine 0 is the launcher whose address is --master-addr (the first of them
// to serve the store, when several are), the others are numbered in the order they join.
inline constexpr int kAutoMachineId = -1;
inline constexpr std::chrono::seconds kDefaultStallWarning{60};
using training::kDefaultBatchSize;
using training::kDefaultBucketCapBytes;
using training::kDefaultDataDir;

enum class Command {
  kTrain,     // the default: rendezvous, spawn workers, train
  kPlugins,   // `launcher plugins`: list what the plugin search path holds
  kSelftest,  // `launcher --selftest`: rendezvous, then a barrier and an allgather of ranks
              // through the backend; no training
  kWorker,    // internal: a worker process started by a launcher (--worker)
  kHelp,
  kVersion,
};

struct Options {
  Command command = Command::kTrain;
  std::string help_section;  // --help SECTION: the one section to print; "" for all

  // Plugins.
  std::vector<std::string> plugin_dirs;  // --plugin-dir (repeatable), searched first
  std::string backend = "auto";          // --backend gloo|nccl|tcp|auto|<plugin name>
  std::string backend_options;           // --backend-options "k=v,k=v"

  // Job shape and rendezvous.
  int num_machines = 1;  // --num-machines N >= 1, or the most of an elastic MIN:MAX
  int min_machines = 1;  // the least of --num-machines MIN:MAX; num_machines for a fixed job
  int machine_id = kAutoMachineId;        // --machine-id in [0, num_machines) or auto
  int num_processes = 1;                  // --num-processes >= 1 (workers on this machine)
  std::string master_addr = "127.0.0.1";  // --master-addr, default $MASTER_ADDR
  int master_port = kDefaultMasterPort;   // --master-port in [0, 65535], default $MASTER_PORT
  std::string job_token;                  // --job-token, default $DPL_JOB_TOKEN
  std::string store;  // --store: "" the built-in store of machine 0, or etcd://HOST:PORT,...
  std::chrono::milliseconds rendezvous_timeout = kDefaultRendezvousTimeout;
  std::chrono::milliseconds backend_timeout = kDefaultBackendTimeout;
  int threads_per_worker = 0;  // --threads-per-worker; 0 = cores / local workers, at least 1
  std::string log_dir;         // --log-dir: one log file per rank
  int max_restarts = 0;        // --max-restarts N
  // --restart-workers: an elastic job's change of machines restarts the workers instead of
  // regrouping them in place (Note [Shrink in place] in training/live_state.hpp).
  bool restart_workers = false;
  // An elastic job starts once min_machines joined and none came for this long.
  std::chrono::milliseconds join_grace = kDefaultJoinGrace;
  log::TimeFormat log_time = log::TimeFormat::kIso;  // --log-time iso|elapsed|none
  // --stall-warning: a backend call blocked this long is reported to the launcher; 0 = never.
  std::chrono::milliseconds stall_warning = kDefaultStallWarning;
  bool elastic() const { return min_machines < num_machines; }
  // Set on the options of one attempt (supervision's AttemptOptions) of an elastic job: its
  // members' --machine-id by place (the place gives the ranks; messages name the id a user gave).
  // Empty for a fixed job, whose places are its ids.
  std::vector<int> machine_ids_by_place;
  // Whether these are an elastic attempt's options: its machines are the attempt's members, every
  // one of which has joined it.
  bool attempt_of_elastic_job() const { return !machine_ids_by_place.empty(); }
  // The id of the machine at `place`, for messages.
  int MachineIdAt(int place) const {
    return place >= 0 && place < static_cast<int>(machine_ids_by_place.size())
               ? machine_ids_by_place[static_cast<size_t>(place)]
               : place;
  }

  // One command for many machines: --hostfile starts a launcher on every host it lists.
  std::string hostfile;           // --hostfile FILE (DeepSpeed's `HOST slots=N` lines)
  std::string ssh_options;        // --ssh-options "..." for the ssh of every remote host
  bool exit_with_stdin = false;   // --exit-with-stdin: stop when standard input closes
  bool no_flag_warnings = false;  // --no-flag-warnings: FlagsWithoutEffect is not logged
  // --preflight: the link test (worker/link_test.hpp) before the first step, warning of slow links.
  bool preflight = false;

  // What the cluster's environment gave, for the launcher's first line ("" when nothing).
  std::string cluster_environment;
  std::string config_file;  // --config: read by the parser; kept so that no output replaces it
  // The flags the command line or the config file gave (names without dashes), for decisions
  // that depend on whether a value is a default (--hostfile takes the processes from its slots).
  std::vector<std::string> given_flags;
  bool Given(const std::string& flag) const;

  // A program's job (`launcher [flags] -- PROGRAM [ARGS...]`): PROGRAM and its arguments, started
  // once per rank in place of the built-in training loop (Note [A program's workers] in
  // protocol/program_environment.hpp). Empty: the built-in loop.
  std::vector<std::string> program;
  // --env NAME[=VALUE] (repeatable): NAME=VALUE entries every worker of this machine gets, which
  // --hostfile passes on to every host (NAME alone: this host's value).
  std::vector<std::string> environment;
  // --log-ranks: "all", ranks apart by commas ("0,3"), or "" for the default (LogsRank).
  std::string log_ranks;
  bool runs_program() const { return !program.empty(); }

  // Everything the training loop reads (training/config.hpp).
  training::TrainingConfig training;

  // Set by a launcher for the workers it starts (command kWorker); not for users.
  int local_rank = -1;                 // --local-rank
  bool selftest_job = false;           // --selftest given: true for the launcher AND its workers
  std::string store_addr;              // --store-addr host:port of the running store
  std::vector<int> worker_output_fds;  // --worker-outputs: the machine's worker loader forks one
                                       // worker per descriptor (Note [One load per machine])
};

// The spellings of --log-time.
inline const training::Spellings<log::TimeFormat>& LogTimeNames() {
  static const training::Spellings<log::TimeFormat> names = {{"iso", log::TimeFormat::kIso},
                                                             {"elapsed", log::TimeFormat::kElapsed},
                                                             {"none", log::TimeFormat::kNone}};
  return names;
}

// Parses argv. Errors name the flag and the allowed range/values. Fills defaults from the
// environment. `launcher plugins` and `launcher --help` are recognised here.
Result<Options> ParseCommandLine(int argc, const char* const* argv);

// Text of --help (cli/help.cpp): the usage, then every flag a user may give, section by section
// (internal ones are left out). With the name of a section (HelpSections), that section alone.
std::string HelpText(const std::string& section = "");

// Every setting that must be the same on every machine of the job (Note [Flags that must agree]
// in flags.hpp), as (flag, value) pairs in table order: {"--lr", "0.5"}, {"--drop-last", "off"}.
// The launchers compare them when they join.
std::vector<std::pair<std::string, std::string>> SettingsThatMustMatch(const Options& options);

// Every option a resumed run must share with its checkpoint (Note [Flags that must agree]), in
// table order, as the checkpoint records it; ParseCommandLine puts them into
// Options::training.resume_settings for the checkpoint policy.
std::vector<training::ResumeSetting> ResumeSettings(const Options& options);

// The job's flags as arguments: every flag the table forwards, none that picks a command, runs
// the hostfile again or belongs to one worker. They start another launcher of this job with these
// options (--hostfile), and follow a worker's internal flags on its command line
// (protocol/worker_command.hpp).
std::vector<std::string> LauncherArguments(const Options& options);

// Whether every line of rank `rank` reaches the console (--log-ranks; by default every rank of a
// program, rank 0 of the built-in loop).
bool LogsRank(const Options& options, int rank);

// The compute threads of each worker of this machine: --threads-per-worker, or (0) the machine's
// cores shared evenly by its workers, at least one. The launcher tells its workers the number and
// puts it into OMP_NUM_THREADS (and MKL's, OpenBLAS's) of their environment.
int ThreadsPerWorker(const Options& options);

}  // namespace dpl::cli
