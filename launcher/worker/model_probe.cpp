// Note [Refused before the workers start]: a model that cannot take the data (the recipe's
// ConvNet takes 1x28x28 in 10 classes, CIFAR-10 is 3x32x32), options the model refuses or a
// --model no plugin provides were found by every worker, each after it had joined the job and
// started its backend, so the job failed seconds in with one error per worker. The machine's
// worker loader now finds it once, before it forks a worker: a child of the loader creates the
// model for the data as a worker would (training::CreateModelForData), writes the outcome to a
// pipe and exits. It is a child because the loader must not start libtorch's thread pools before
// it forks the workers (Note [One load per machine] in worker_main.cpp), and because a plugin
// that crashes in create takes only the child down.
//
// The child computes on the CPU with one thread, whatever the job's device: a CUDA context would
// add most of a second to every start, and shapes do not depend on the device. A CUDA job
// therefore takes only the refusals of its arguments (DPL_ERR_INVALID_ARGUMENT: shapes, options)
// from the child, in fp32, and leaves any other failure to its workers, on their GPUs. The
// check adds about 20 ms to a start, 80 ms for a TorchScript module (docs/data_phase.md).
#include "worker/model_probe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>

#include "common/log.hpp"
#include "protocol/loader_report.hpp"
#include "training/model_setup.hpp"
#include "worker/device_policy.hpp"
#include "worker/worker_session.hpp"

namespace dpl::worker {
namespace {

// The child: creates the model and writes the outcome (protocol::EncodeModelCheck).
[[noreturn]] void RunProbe(int report_fd, const cli::Options& options,
                           const training::ModelPlugin& plugin,
                           const training::TrainingData& data) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the loader may be killed while the child creates
  const int null_fd = open("/dev/null", O_WRONLY);
  if (null_fd >= 0) {  // what the plugin logs while it creates is the workers' to say
    dup2(null_fd, STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
  }
  training::TrainingConfig config = options.training;
  if (config.device == training::Device::kCuda) config.precision = training::Precision::kFp32;
  // As this machine's first worker, but on the CPU with one thread (see the Note).
  training::WorkerIdentity identity = PlaceWorker(options, 0, 0);
  identity.device_type = kDLCPU;
  identity.device_id = 0;
  identity.threads = 1;
  auto model = training::CreateModelForData(plugin, config, identity, data);
  const std::string report = protocol::EncodeModelCheck(model.status());
  size_t written = 0;
  while (written < report.size()) {
    const ssize_t n = write(report_fd, report.data() + written, report.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += size_t(n);
  }
  std::_Exit(0);  // no destructors: the model and libtorch end with the process
}

// Reads the child's report until it closes the pipe or `deadline` passes; false on the deadline.
bool ReadReport(int fd, std::chrono::steady_clock::time_point deadline, std::string* report) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd ready{fd, POLLIN, 0};
    const int polled = poll(&ready, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (polled < 0 && errno != EINTR) return true;
    if (polled <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    report->append(buffer, size_t(n));
  }
}

}  // namespace

Status ProbeModelForData(const cli::Options& options, const plugin_host::Discovery& discovery,
                         const training::TrainingData& data) {
  DPL_ASSIGN_OR_RETURN(auto found, plugin_host::FindPlugin(discovery, DPL_PLUGIN_KIND_MODEL,
                                                           options.training.model));
  const training::ModelPlugin plugin = ModelPluginOf(found);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::Ok();  // undecided: the workers will tell
  std::fflush(nullptr);                                 // nothing buffered may be written twice
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    RunProbe(fds[1], options, plugin, data);
  }
  close(fds[1]);
  if (child < 0) {
    close(fds[0]);
    return Status::Ok();
  }
  std::string report;
  const bool finished =
      ReadReport(fds[0], std::chrono::steady_clock::now() + options.rendezvous_timeout, &report);
  close(fds[0]);
  if (!finished) kill(child, SIGKILL);
  int wait_status = 0;
  while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {
  }
  const std::optional<Status> outcome = protocol::DecodeModelCheck(report);
  const bool cuda = options.training.device == training::Device::kCuda;
  if (!finished) {
    log::Warning("creating the model " + options.training.model + " for the data took over " +
                 std::to_string(options.rendezvous_timeout.count() / 1000) +
                 " s (--rendezvous-timeout); the workers check it themselves");
    return Status::Ok();
  }
  if (!outcome) {  // the child died in the plugin's create
    if (cuda) return Status::Ok();
    const std::string how =
        WIFSIGNALED(wait_status) ? strsignal(WTERMSIG(wait_status)) : "it ended without an outcome";
    return Status::Error("the model plugin '" + options.training.model +
                         "' crashed while creating the model (" + how + "); no worker was started");
  }
  if (outcome->ok() || (cuda && outcome->code() != DPL_ERR_INVALID_ARGUMENT)) return Status::Ok();
  return *outcome;
}

}  // namespace dpl::worker
