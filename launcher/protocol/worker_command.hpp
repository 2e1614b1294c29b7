// The worker's command line: a launcher starts the workers of its machine by executing itself
// again (kSelfExecutable) in the worker role, with the internal flags below before the job's own
// flags (every flag the flag table forwards: cli::LauncherArguments). The flag table
// (cli/flags.cpp) reads the internal flags back under the same names; tests/protocol round-trips
// both commands through the parser.
#pragma once

#include <string>
#include <vector>

namespace dpl::protocol {

// The launcher's own binary, whatever its path or name.
inline constexpr const char* kSelfExecutable = "/proc/self/exe";

// The internal flags (without dashes): set by a launcher for its workers, refused from a user.
inline constexpr const char* kWorkerFlag = "worker";                 // the worker role
inline constexpr const char* kLocalRankFlag = "local-rank";          // one worker: its index
inline constexpr const char* kWorkerOutputsFlag = "worker-outputs";  // the loader: FD,..
inline constexpr const char* kStoreAddrFlag = "store-addr";          // host:port of the store

// `<self> --worker --local-rank N --store-addr HOST:PORT <job_flags>`: one worker, which loads
// the plugins and the data on its own.
std::vector<std::string> WorkerCommand(const std::vector<std::string>& job_flags, int local_rank,
                                       const std::string& store_addr);

// `<self> --worker --worker-outputs FD,.. --store-addr HOST:PORT <job_flags>`: the machine's
// worker loader, which loads once and forks worker i with output_fds[i] as its stdout and stderr
// (Note [One load per machine] in worker/worker_main.cpp).
std::vector<std::string> WorkerLoaderCommand(const std::vector<std::string>& job_flags,
                                             const std::vector<int>& output_fds,
                                             const std::string& store_addr);

}  // namespace dpl::protocol
