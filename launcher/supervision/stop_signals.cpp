#include "supervision/stop_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace dpl::supervision {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_preemption_signal{0};
std::atomic<bool> g_preemptible{false};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "set from a signal handler");

extern "C" void OnStopSignal(int signal_number) {
  const bool preempts = signal_number == SIGTERM || signal_number == SIGUSR1;
  if (preempts && g_preemptible.load()) {
    g_preemption_signal.store(signal_number);
  } else {
    g_stop_signal.store(signal_number);
  }
}

}  // namespace

void InstallStopHandlers(OnTermination on_termination) {
  g_preemptible.store(on_termination == OnTermination::kPreempt);
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  g_installed.store(true);
}

int StopSignal() {
  return g_stop_signal.load();
}

int PreemptionSignal() {
  return g_preemption_signal.load();
}

void StopAsBy(int signal_number) {
  g_stop_signal.store(signal_number);
  if (!g_installed.load()) kill(getpid(), signal_number);
}

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return std::to_string(signal_number) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

}  // namespace dpl::supervision
