#include "supervision/worker_environment.hpp"

#include <algorithm>
#include <cstring>

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
                      std::find(std::begin(thread_counts), std::end(thread_counts), name) !=
                          std::end(thread_counts);
    if (!ours) environment.push_back(text);
  }
  AddWorkerHeapSettings(&environment);
  for (const char* name : thread_counts) {
    environment.push_back(std::string(name) + "=" + std::to_string(threads));
  }
  environment.push_back(std::string(kAttemptEnvironmentVariable) + "=" + std::to_string(attempt));
  if (!options.job_token.empty()) {
    environment.push_back(std::string(kJobTokenEnv) + "=" + options.job_token);
  }
  return environment;
}

}  // namespace dpl::supervision
