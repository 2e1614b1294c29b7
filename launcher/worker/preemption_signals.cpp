#include "worker/preemption_signals.hpp"

#include <signal.h>
#include <unistd.h>

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

training::PreemptionCheck MakePreemptionCheck(training::Collectives& collectives, bool* stopped) {
  return [&collectives, stopped](int64_t step) -> Result<bool> {
    Result<bool> stop = collectives.AnyRankSays("preempt", step, training::PreemptionRequested());
    if (!stop.ok()) {
      return stop.status().WithContext("the ranks' check for a preemption at the step boundary");
    }
    if (*stop) *stopped = true;
    return stop;
  };
}

}  // namespace dpl::worker
