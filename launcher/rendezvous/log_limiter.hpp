// Keeps the store's log readable when something floods its port: at most a burst of lines per
// window, and the next line let through says how many were suppressed.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace dpl::rendezvous {

// The store server's budgets: lines about single connections (refused, malformed, timed out)
// and about a failing accept (out of descriptors: one line says it all).
inline constexpr int kConnectionLogBurst = 5;
inline constexpr std::chrono::seconds kConnectionLogWindow{60};
inline constexpr int kAcceptLogBurst = 1;
inline constexpr std::chrono::seconds kAcceptLogWindow{60};

// Not thread-safe; the store server uses each from its one thread.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  LogLimiter(int burst, Clock::duration window) : burst_(burst), window_(window) {}

  // The line to write for `message` at `now`, or nullopt to drop it.
  std::optional<std::string> Admit(const std::string& message, Clock::time_point now) {
    if (!window_start_ || now - *window_start_ >= window_) {
      window_start_ = now;
      admitted_ = 0;
    }
    if (admitted_ >= burst_) {
      ++suppressed_;
      return std::nullopt;
    }
    ++admitted_;
    if (suppressed_ == 0) return message;
    const std::string line =
        message + " (" + std::to_string(suppressed_) +
        (suppressed_ == 1 ? " similar message was" : " similar messages were") +
        " suppressed before it)";
    suppressed_ = 0;
    return line;
  }

 private:
  const int burst_;
  const Clock::duration window_;
  std::optional<Clock::time_point> window_start_;
  int admitted_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace dpl::rendezvous
