#include "supervision/stop_signals.hpp"

#include <csignal>
#include <cstring>

namespace dpl::supervision {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void OnStopSignal(int signal_number) {
  g_stop_signal = signal_number;
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int StopSignal() {
  return g_stop_signal;
}

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return std::to_string(signal_number) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

}  // namespace dpl::supervision
