#include "worker/preemption_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include "rendezvous/step_vote.hpp"

namespace dpl::worker {
namespace {

extern "C" void OnPreemptionSignal(int signal_number, siginfo_t* info, void*) {
  if (signal_number == SIGTERM && info != nullptr && info->si_code == SI_USER &&
      info->si_pid == getppid()) {
    // The launcher stops this worker: SIGTERM's default action, once this handler returns.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGTERM, &fallback, nullptr);
    raise(SIGTERM);
    return;
  }
  training::RequestPreemption();
}

}  // namespace

bool Preemptible(const cli::Options& options) {
  const bool trains = options.command == cli::Command::kTrain ||
                      (options.command == cli::Command::kWorker && !options.selftest_job);
  return trains && !options.training.checkpoint_dir.empty();
}

void InstallPreemptionHandlers() {
  struct sigaction action {};
  action.sa_sigaction = OnPreemptionSignal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

training::PreemptionCheck MakePreemptionCheck(const training::WorkerIdentity& identity,
                                              training::Backend* backend,
                                              rendezvous::StoreClient& client,
                                              const std::string& attempt_prefix,
                                              std::chrono::milliseconds timeout, bool* stopped) {
  auto decided = [stopped](Result<bool> stop) {
    if (stop.ok() && *stop) *stopped = true;
    return stop;
  };
  if (identity.world_size == 1 || backend == nullptr) {
    return [decided](int64_t) { return decided(training::PreemptionRequested()); };
  }
  if (backend->device_type() == kDLCPU) {
    return [decided, backend](int64_t) {
      return decided(
          training::AnyRankAskedThroughBackend(*backend, training::PreemptionRequested()));
    };
  }
  const int world_size = identity.world_size;
  return [decided, &client, attempt_prefix, timeout, world_size](int64_t step) {
    return decided(rendezvous::AnyRankVoted(client, attempt_prefix, "preempt", step, world_size,
                                            training::PreemptionRequested(), timeout));
  };
}

}  // namespace dpl::worker
