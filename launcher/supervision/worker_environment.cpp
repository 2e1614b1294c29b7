#include "supervision/worker_environment.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

#include "protocol/program_environment.hpp"
#include "rendezvous/regroup.hpp"

extern char** environ;

namespace dpl::supervision {
namespace {

// Note [Worker heap]: loading libtorch registers thousands of operators, a flood of small
// allocations, and glibc grows its heap 128 KiB at a time, each fresh 4 KiB page a fault. The
// worker loader starts with glibc's heap grown 64 MiB at a time (MALLOC_TOP_PAD_) and backed by
// transparent huge pages (glibc.malloc.hugetlb=1, which madvises the heap; it takes effect only
// where the kernel allows THP on madvise, as Debian's does): a quarter less load time for the
// ConvNet plugin, at 2 MiB more memory (docs/performance.md, "Worker heap"). The training steps
// then run on that heap as well. glibc reads both only at exec, hence the environment. (The
// SDK's model helper raises the top pad again in create, for hosts other than the launcher.)
constexpr const char* kTopPadEnv = "MALLOC_TOP_PAD_";
constexpr const char* kWorkerTopPad = "67108864";
constexpr const char* kTunablesEnv = "GLIBC_TUNABLES";
constexpr const char* kHugePageHeapTunable = "glibc.malloc.hugetlb";
constexpr const char* kHugePageHeapSetting = "glibc.malloc.hugetlb=1";

// Note [torchrun's worker variables]: what torchrun's agent gives each worker
// (protocol::kTorchrunWorkerVariables), so that code written for torchrun (a plugin that reads
// RANK or WORLD_SIZE) works unchanged. The launcher sets those its machine's workers share; each
// worker adds RANK, LOCAL_RANK and ROLE_RANK (worker::ExportRankVariables). MASTER_ADDR:MASTER_PORT
// is dpl's store on machine 0, which speaks dpl's protocol, not torch's TCPStore: a plugin may
// read the address, not open a torch store there (a program's workers get a TCPStore's port: Note
// [A program's workers] in protocol/program_environment.hpp). Inherited values of these names (a
// launcher started by Slurm or Kubernetes has some) are replaced.

// Note [torchrun's worker variables], those every worker of this machine shares.
void AddTorchrunVariables(const cli::Options& options, int attempt,
                          std::vector<std::string>* environment) {
  const int world_size = options.num_machines * options.num_processes;
  const std::pair<const char*, std::string> values[] = {
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.num_processes)},
      {"GROUP_RANK", std::to_string(options.machine_id)},
      {"GROUP_WORLD_SIZE", std::to_string(options.num_machines)},
      {"ROLE_WORLD_SIZE", std::to_string(world_size)},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(options.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)},
  };
  for (const auto& [name, value] : values) environment->push_back(std::string(name) + "=" + value);
}

}  // namespace

// Note [Worker heap] into a worker's environment (NAME=value entries); a setting the user made
// wins: their MALLOC_TOP_PAD_ stays, and the tunable joins their GLIBC_TUNABLES unless it names
// its own glibc.malloc.hugetlb.
void AddWorkerHeapSettings(std::vector<std::string>* environment) {
  const auto named = [&](const std::string& name) {
    return std::find_if(environment->begin(), environment->end(), [&](const std::string& entry) {
      return entry.compare(0, name.size() + 1, name + "=") == 0;
    });
  };
  if (named(kTopPadEnv) == environment->end()) {
    environment->push_back(std::string(kTopPadEnv) + "=" + kWorkerTopPad);
  }
  const auto tunables = named(kTunablesEnv);
  if (tunables == environment->end()) {
    environment->push_back(std::string(kTunablesEnv) + "=" + kHugePageHeapSetting);
  } else if (tunables->find(kHugePageHeapTunable) == std::string::npos) {
    const bool empty = tunables->size() == std::strlen(kTunablesEnv) + 1;
    *tunables += std::string(empty ? "" : ":") + kHugePageHeapSetting;
  }
}

std::vector<std::string> WorkerEnvironment(const cli::Options& options, int threads, int attempt) {
  const char* thread_counts[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
  std::vector<std::string> environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    const bool ours = name == kAttemptEnvironmentVariable || name == kJobTokenEnv ||
                      name == rendezvous::kRegroupEnvironmentVariable ||
                      protocol::IsTorchrunWorkerVariable(name) ||
                      std::find(std::begin(thread_counts), std::end(thread_counts), name) !=
                          std::end(thread_counts);
    const bool given = protocol::FindVariable(options.environment, name) != nullptr;
    if (!ours && !given) environment.push_back(text);
  }
  // --env NAME=VALUE wins over this launcher's own value.
  environment.insert(environment.end(), options.environment.begin(), options.environment.end());
  AddWorkerHeapSettings(&environment);
  for (const char* name : thread_counts) {
    environment.push_back(std::string(name) + "=" + std::to_string(threads));
  }
  environment.push_back(std::string(kAttemptEnvironmentVariable) + "=" + std::to_string(attempt));
  AddTorchrunVariables(options, attempt, &environment);
  if (!options.job_token.empty()) {
    environment.push_back(std::string(kJobTokenEnv) + "=" + options.job_token);
  }
  return environment;
}

}  // namespace dpl::supervision
