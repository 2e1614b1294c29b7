#include "worker/local_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.hpp"
#include "rendezvous/join.hpp"

namespace dpl::worker {
namespace {

int InheritedMemory() {
  const char* text = std::getenv(kLocalMemoryEnvironmentVariable);
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  if (*end != '\0' || fd < 0 || ::fcntl(int(fd), F_GETFD) < 0) return -1;
  return int(fd);
}

}  // namespace

void ShareMemoryWithWorkers(const cli::Options& options) {
  ::unsetenv(kLocalMemoryEnvironmentVariable);  // never a descriptor of another job's
  if (options.num_processes < 2) return;
  // No MFD_CLOEXEC: workers started fresh from the executable keep it across exec.
  const int fd = ::memfd_create("dpl-local-reduce", 0);
  if (fd < 0) {
    log::Warning(std::string("cannot make this machine's shared memory (memfd_create: ") +
                 std::strerror(errno) + "); its workers sum their gradients through the backend");
    return;
  }
  ::setenv(kLocalMemoryEnvironmentVariable, std::to_string(fd).c_str(), 1);
}

bool SumsAcrossMachines(const cli::Options& options) {
  return options.num_machines > 1 && options.num_processes > 1 &&
         options.training.local_reduce == training::LocalReduce::kSharedMemory &&
         options.training.device == training::Device::kCpu && !options.training.mirror_parameters &&
         InheritedMemory() >= 0;
}

training::LocalGroup LocalGroupOf(const cli::Options& options,
                                  const training::WorkerIdentity& identity,
                                  training::Backend* across_machines) {
  training::LocalGroup group;
  group.memory_fd = InheritedMemory();
  group.local_rank = identity.local_rank;
  group.local_world_size = identity.local_world_size;
  group.machine = options.machine_id;
  group.machines = options.num_machines;
  group.attempt = uint32_t(rendezvous::AttemptOfThisWorker());
  group.across_machines = across_machines;
  group.timeout = options.backend_timeout;
  return group;
}

}  // namespace dpl::worker
