// Every flag of the launcher, from the command line, a config file (--config FILE, the same names
// without dashes: `epochs = 2`) and environment defaults (MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN;
// plugins also come from DPL_PLUGIN_PATH). The flags themselves, their ranges, help and how a
// worker receives them, are one table: cli/flags.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "common/status.hpp"
#include "training/config.hpp"

namespace dpl::cli {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr std::chrono::seconds kDefaultRendezvousTimeout{300};
inline constexpr std::chrono::seconds kDefaultBackendTimeout{300};
inline constexpr std::chrono::seconds kDefaultStopGracePeriod{5};
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

  // Plugins.
  std::vector<std::string> plugin_dirs;  // --plugin-dir (repeatable), searched first
  std::string backend = "auto";          // --backend gloo|nccl|tcp|auto|<plugin name>
  std::string backend_options;           // --backend-options "k=v,k=v"

  // Job shape and rendezvous.
  int num_machines = 1;                   // --num-machines >= 1
  int machine_id = 0;                     // --machine-id in [0, num_machines)
  int num_processes = 1;                  // --num-processes >= 1 (workers on this machine)
  std::string master_addr = "127.0.0.1";  // --master-addr, default $MASTER_ADDR
  int master_port = kDefaultMasterPort;   // --master-port in [0, 65535], default $MASTER_PORT
  std::string job_token;                  // --job-token, default $DPL_JOB_TOKEN
  std::chrono::milliseconds rendezvous_timeout = kDefaultRendezvousTimeout;
  std::chrono::milliseconds backend_timeout = kDefaultBackendTimeout;
  int threads_per_worker = 0;  // --threads-per-worker; 0 = cores / local workers, at least 1
  std::string log_dir;         // --log-dir: one log file per rank
  log::TimeFormat log_time = log::TimeFormat::kIso;  // --log-time iso|elapsed|none
  // --stall-warning: a backend call blocked this long is reported to the launcher; 0 = never.
  std::chrono::milliseconds stall_warning = kDefaultStallWarning;
  int max_restarts = 0;  // --max-restarts N

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

// Text of --help: every flag a user may give (internal ones are left out).
std::string HelpText();

// Re-serialises the options a worker needs as argv for `launcher --worker ...`.
std::vector<std::string> WorkerArguments(const Options& options, int local_rank,
                                         const std::string& store_addr);

// The same for `launcher --worker --worker-outputs FD,..`, the machine's worker loader: it loads
// the plugins and the data once and forks worker i with output_fds[i] as its stdout and stderr.
std::vector<std::string> WorkerLoaderArguments(const Options& options,
                                               const std::vector<int>& output_fds,
                                               const std::string& store_addr);

}  // namespace dpl::cli
