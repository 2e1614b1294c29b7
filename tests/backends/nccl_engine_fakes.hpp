// The fakes the nccl engine's tests drive plugins/nccl's CollectiveEngine with: its device queue,
// communicator and clock, and a fixture of rank 1 of 2 (nccl_engine_test.cpp,
// nccl_engine_abort_test.cpp). The fake clock moves only when the engine pauses between two
// polls, so timeouts are exact, not timing luck.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "collective_engine.hpp"
#include "dpl/support/error.hpp"

namespace dpl::nccl::testing {

using dpl::nccl::CollectiveEngine;
using dpl::nccl::DeviceQueue;
using dpl::nccl::EngineIdentity;
using dpl::nccl::Progress;
using namespace std::chrono_literals;

inline void* const kComputeStream = reinterpret_cast<void*>(0xC0);
inline void* const kOptimizerStream = reinterpret_cast<void*>(0x0F);
inline void* const kOwnStream = reinterpret_cast<void*>(0x5E);

inline std::string StreamName(void* stream) {
  if (stream == kComputeStream) return "compute";
  if (stream == kOptimizerStream) return "optimizer";
  if (stream == kOwnStream) return "own";
  if (stream == nullptr) return "legacy";
  return "unknown";
}

// Each poll moves time on by one millisecond.
class FakeWaiter final : public dpl::nccl::Waiter {
 public:
  // Runs at each pause, before time moves on: what another thread does meanwhile.
  std::function<void(int round)> on_pause;

  std::chrono::steady_clock::time_point Now() override { return now_; }
  void Pause(int round) override {
    if (on_pause) on_pause(round);
    now_ += 1ms;
  }
  std::chrono::milliseconds Elapsed() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now_ - start_);
  }

 private:
  std::chrono::steady_clock::time_point start_{};
  std::chrono::steady_clock::time_point now_{};
};

// A device queue that logs what it is asked in order. A marker is reached after a set number of
// queries (kNever: never), or fails with a device error.
class FakeQueue final : public DeviceQueue {
 public:
  static constexpr int kNever = -1;
  int queries_until_reached = 0;  // for the markers made from now on
  bool fail_next_marker = false;
  std::vector<std::string> log;
  std::vector<Marker> released;

  void* Stream() override { return kOwnStream; }
  void WaitFor(void* caller) override { log.push_back("own waits for " + StreamName(caller)); }
  Marker Mark() override {
    const Marker marker = next_++;
    remaining_[marker] = fail_next_marker ? -2 : queries_until_reached;
    log.push_back("mark " + std::to_string(marker));
    return marker;
  }
  Progress Query(Marker marker) override {
    int& left = remaining_.at(marker);
    if (left == -2) return Progress::Failed(DPL_ERR_INTERNAL, "cudaErrorIllegalAddress");
    if (left == kNever) return Progress::Pending();
    if (left > 0) {
      --left;
      return Progress::Pending();
    }
    if (std::find(reached_.begin(), reached_.end(), marker) == reached_.end()) {
      reached_.push_back(marker);
      log.push_back("reached " + std::to_string(marker));
    }
    return Progress::Done();
  }
  void Release(Marker marker) override { released.push_back(marker); }
  void OrderCallerAfter(void* caller) override {
    log.push_back(StreamName(caller) + " waits for own");
  }

 private:
  Marker next_ = 1;
  std::map<Marker, int> remaining_;
  std::vector<Marker> reached_;
};

// A communicator whose state the test scripts: pending for a number of polls (setup, finalize,
// an enqueue), or failed with an asynchronous error from a given poll on.
class FakeCommunicator final : public dpl::nccl::Communicator {
 public:
  static constexpr int kNever = -1;
  int pending_polls = 0;             // State() is pending this many more times (kNever: always)
  int async_error_at_poll = kNever;  // from this State() poll on (counted from 1), an error
  int finalize_pending_polls = 0;    // pending_polls after Finalize
  std::vector<std::string> calls;    // abort, finalize, destroy
  int polls = 0;

  Progress State() override {
    ++polls;
    if (async_error_at_poll != kNever && polls >= async_error_at_poll) {
      return Progress::Failed(DPL_ERR_COMMUNICATION,
                              "remote process exited or there was a network error");
    }
    if (pending_polls == kNever) return Progress::Pending();
    if (pending_polls > 0) {
      --pending_polls;
      return Progress::Pending();
    }
    return Progress::Done();
  }
  void Abort() override { calls.push_back("abort"); }
  Progress Finalize() override {
    calls.push_back("finalize");
    pending_polls = finalize_pending_polls;
    return Progress::Pending();
  }
  void Destroy() override { calls.push_back("destroy"); }
};

struct Outcome {
  dpl_status status;
  std::string message;
};

inline bool operator==(const Outcome& a, const Outcome& b) {
  return a.status == b.status && a.message == b.message;
}

inline std::ostream& operator<<(std::ostream& out, const Outcome& outcome) {
  return out << "status " << outcome.status << ": \"" << outcome.message << "\"";
}

// Runs `body` as a plugin entry does (dpl::support::Guarded, prefix "nccl").
template <typename Body>
Outcome Call(Body&& body) {
  const dpl_status status = dpl::support::Guarded("nccl", [&] { body(); });
  return {status, dpl::support::LastError()};
}

class NcclEngineTest : public ::testing::Test {
 protected:
  // Rank 1 of 2 with a 2.5 s timeout, as a job run with --backend-timeout 2.5 would have.
  NcclEngineTest()
      : engine_(&communicator_, &queue_, &waiter_, EngineIdentity{1, 2, 2500ms}, Logger()) {}

  dpl::nccl::LogFunction Logger() {
    return [this](dpl_log_level level, const std::string& message) {
      logged_.push_back(std::to_string(level) + " " + message);
    };
  }

  // An allreduce of 1024 float32 from the compute stream, launched as NCCL answers `answer`.
  Outcome Allreduce(Progress answer = Progress::Done()) {
    return Call([&] {
      engine_.Issue("allreduce", "sum of 1024 float32", kComputeStream, [&](void* stream) {
        queue_.log.push_back("allreduce on " + StreamName(stream));
        ++launches_;
        return answer;
      });
    });
  }

  FakeWaiter waiter_;
  FakeQueue queue_;
  FakeCommunicator communicator_;
  CollectiveEngine engine_;
  std::vector<std::string> logged_;
  int launches_ = 0;
};

}  // namespace dpl::nccl::testing
