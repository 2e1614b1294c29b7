// Every flag of the launcher, parsed by Boost.Program_options from the command line, a config
// file (--config FILE, same names without dashes: `epochs = 2`) and environment defaults
// (MASTER_ADDR, MASTER_PORT, DPL_JOB_TOKEN, DPL_PLUGIN_PATH).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cli {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr int kDefaultBatchSize = 128;  // the recipe's global batch
inline constexpr std::chrono::seconds kDefaultRendezvousTimeout{300};
inline constexpr std::chrono::seconds kDefaultBackendTimeout{300};
inline constexpr std::chrono::seconds kDefaultStopGracePeriod{5};
inline constexpr int64_t kDefaultBucketCapBytes = 25LL * 1024 * 1024;  // as DDP
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

enum class Command {
  kTrain,     // the default: rendezvous, spawn workers, train
  kPlugins,   // `launcher plugins`: list what the plugin search path holds
  kSelftest,  // `launcher --selftest`: rendezvous + barrier + allgather of ranks, no training
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
  std::string model = "convnet";         // --model
  std::string model_options;             // --model-options "k=v,k=v"

  // Job shape and rendezvous.
  int num_machines = 1;                   // --num-machines >= 1
  int machine_id = 0;                     // --machine-id in [0, num_machines)
  int num_processes = 1;                  // --num-processes >= 1 (workers on this machine)
  std::string master_addr = "127.0.0.1";  // --master-addr, default $MASTER_ADDR
  int master_port = kDefaultMasterPort;   // --master-port in [0, 65535], default $MASTER_PORT
  std::string job_token;                  // --job-token, default $DPL_JOB_TOKEN
  std::chrono::milliseconds rendezvous_timeout =
      kDefaultRendezvousTimeout;                                       // --rendezvous-timeout s
  std::chrono::milliseconds backend_timeout = kDefaultBackendTimeout;  // --backend-timeout s
  int threads_per_worker = 0;  // --threads-per-worker; 0 = cores / local workers, at least 1
  std::string log_dir;         // --log-dir: one log file per rank

  // Training.
  int epochs = 1;                          // --epochs >= 1
  int batch_size = kDefaultBatchSize;      // --batch-size: GLOBAL batch, divisible by world size
  std::string data_dir = kDefaultDataDir;  // --data-dir
  std::string data_cache_dir;          // --data-cache DIR|none ("" = none); default under ~/.cache
  int64_t max_steps = 0;               // --max-steps: stop after this many steps (0 = all)
  uint64_t seed = 0;                   // --seed
  bool drop_last = false;              // --drop-last
  std::string device = "cpu";          // --device cpu|cuda
  std::string optimizer = "adadelta";  // --optimizer adadelta|sgd|adam
  double learning_rate = 0.5;          // --lr (the recipe's Adadelta lr)
  double momentum = 0.0;               // --momentum (sgd)
  int grad_accum = 1;                  // --grad-accum K >= 1
  std::string grad_compression = "none";              // --grad-compression none|fp16|bf16
  int64_t bucket_cap_bytes = kDefaultBucketCapBytes;  // --bucket-cap-mb
  int log_interval = 10;                              // --log-interval (batches)
  std::string metrics_file;                           // --metrics FILE (JSON lines)
  std::string checkpoint_dir;                         // --checkpoint-dir
  int64_t checkpoint_every = 0;     // --checkpoint-every N steps (0 = only at the end)
  bool resume = false;              // --resume
  int max_restarts = 0;             // --max-restarts N
  bool progress = true;             // --no-progress turns the terminal progress bar off
  bool evaluate = true;             // --no-eval skips the test-set evaluation at the end
  bool mirror_parameters = false;   // --mirror-parameters: the optimizer updates a host copy
                                    // (always so for a model on a CUDA device)
  std::string dump_parameters_dir;  // --dump-parameters DIR: each rank writes its final
                                    // parameters to DIR/rank-N.bin (tests compare them)

  // Set by a launcher for the workers it starts (command kWorker); not for users.
  int local_rank = -1;                 // --local-rank
  bool selftest_job = false;           // --selftest given: true for the launcher AND its workers
  std::string store_addr;              // --store-addr host:port of the running store
  std::vector<int> worker_output_fds;  // --worker-outputs: the machine's worker loader forks one
                                       // worker per descriptor (Note [One load per machine])
};

// Parses argv. Errors name the flag and the allowed range/values. Fills defaults from the
// environment. `launcher plugins` and `launcher --help` are recognised here.
Result<Options> ParseCommandLine(int argc, const char* const* argv);

// Text of --help.
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
