// The nccl backend's ordering and watchdog logic (see collective_engine.hpp).
#include "collective_engine.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "dpl/support/error.hpp"

namespace dpl::nccl {

using support::PluginError;

namespace {

std::string TimeoutText(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms (--backend-timeout)";
}

}  // namespace

std::chrono::steady_clock::time_point SteadyWaiter::Now() {
  return std::chrono::steady_clock::now();
}

void SteadyWaiter::Pause(int round) {
  if (round < kYieldingRounds) {
    std::this_thread::yield();
    return;
  }
  const int doublings = std::min(round - kYieldingRounds, 10);
  std::this_thread::sleep_for(std::min(kLongestPause, std::chrono::microseconds(1 << doublings)));
}

CollectiveEngine::CollectiveEngine(Communicator* communicator, DeviceQueue* queue, Waiter* waiter,
                                   EngineIdentity identity, LogFunction log)
    : communicator_(communicator),
      queue_(queue),
      waiter_(waiter),
      identity_(identity),
      log_(std::move(log)) {}

std::string CollectiveEngine::Rank() const {
  return "rank " + std::to_string(identity_.rank) + " of " + std::to_string(identity_.world_size);
}

void CollectiveEngine::AwaitReady(const Progress& started) {
  if (started.failed())
    AbortWith(started.status, "NCCL communicator setup failed: " + started.error);
  const auto deadline = waiter_->Now() + identity_.timeout;
  for (int round = 0;; ++round) {
    const Progress state = communicator_->State();
    if (state.done()) return;
    if (state.failed()) AbortWith(state.status, "NCCL communicator setup failed: " + state.error);
    if (waiter_->Now() >= deadline) {
      AbortWith(DPL_ERR_TIMEOUT, "NCCL communicator setup did not finish within " +
                                     TimeoutText(identity_.timeout) +
                                     ": a peer did not join (see the other ranks' logs)");
    }
    waiter_->Pause(round);
  }
}

void CollectiveEngine::CheckUsable() const {
  if (!aborted_) return;
  throw PluginError(DPL_ERR_COMMUNICATION,
                    Rank() + ": the NCCL communicator was aborted after an earlier failure (" +
                        abort_reason_ +
                        "); this backend instance cannot be used again: restart the job "
                        "(--max-restarts)");
}

void CollectiveEngine::HonourAbortRequest(const std::string& during) {
  if (!abort_requested_.load(std::memory_order_acquire) || aborted_) return;
  AbortWith(DPL_ERR_COMMUNICATION, "the host aborted this instance (abort) during " + during);
}

void CollectiveEngine::Issue(const std::string& kind, const std::string& detail,
                             std::optional<void*> caller_stream,
                             const std::function<Progress(void* stream)>& launch) {
  HonourAbortRequest(kind);
  CheckUsable();
  ReapFinished();
  const std::string name = kind + " #" + std::to_string(issued_ + 1) +
                           (detail.empty() ? std::string() : " (" + detail + ")");
  if (in_flight_.size() >= kMaxInFlight) AwaitInFlightBelow(kMaxInFlight, name);
  // A caller stream the queue cannot wait for (a bad handle) refuses this call only: nothing
  // was enqueued yet, so the ranks still agree.
  if (caller_stream.has_value()) queue_->WaitFor(*caller_stream);
  ++issued_;
  const Progress launched = launch(queue_->Stream());
  if (launched.failed())
    AbortWith(launched.status, name + " could not be issued: " + launched.error);
  if (launched.pending()) AwaitCommunicator(name);
  DeviceQueue::Marker marker = 0;
  try {
    marker = queue_->Mark();
  } catch (const PluginError& error) {
    AbortWith(DPL_ERR_INTERNAL, "cannot watch " + name + ": " + error.what());
  }
  in_flight_.push_back({name, marker});
}

void CollectiveEngine::Synchronize(void* caller_stream) {
  HonourAbortRequest("synchronize");
  CheckUsable();
  AwaitAll("synchronize");
  queue_->OrderCallerAfter(caller_stream);
}

void CollectiveEngine::AwaitAll(const std::string& during) {
  HonourAbortRequest(during);
  CheckUsable();
  AwaitInFlightBelow(1, during);
}

void CollectiveEngine::ReapFinished() {
  while (!in_flight_.empty()) {
    const InFlight& oldest = in_flight_.front();
    const Progress progress = queue_->Query(oldest.marker);
    if (progress.pending()) return;
    if (progress.failed()) {
      AbortWith(progress.status == DPL_OK ? DPL_ERR_INTERNAL : progress.status,
                "the device failed while " + oldest.what + " was in flight: " + progress.error);
    }
    queue_->Release(oldest.marker);
    in_flight_.pop_front();
  }
}

void CollectiveEngine::AwaitCommunicator(const std::string& what) {
  const auto deadline = waiter_->Now() + identity_.timeout;
  for (int round = 0;; ++round) {
    if (abort_requested_.load(std::memory_order_acquire)) {
      HonourAbortRequest("the enqueuing of " + what);
    }
    const Progress state = communicator_->State();
    if (state.done()) return;
    if (state.failed())
      AbortWith(state.status, "NCCL failed enqueuing " + what + ": " + state.error);
    if (waiter_->Now() >= deadline) {
      AbortWith(DPL_ERR_TIMEOUT,
                what + " was still being enqueued after " + TimeoutText(identity_.timeout));
    }
    waiter_->Pause(round);
  }
}

void CollectiveEngine::AwaitInFlightBelow(size_t limit, const std::string& during) {
  const auto deadline = waiter_->Now() + identity_.timeout;
  for (int round = 0;; ++round) {
    if (abort_requested_.load(std::memory_order_acquire)) {
      HonourAbortRequest(in_flight_.empty() ? during
                                            : during + ", waiting for " + in_flight_.front().what);
    }
    const Progress state = communicator_->State();
    if (state.failed()) {
      const std::string what =
          in_flight_.empty() ? during : in_flight_.front().what + " was in flight";
      AbortWith(state.status, "NCCL reported an error while " + what + ": " + state.error);
    }
    ReapFinished();
    if (in_flight_.size() < limit) return;
    if (waiter_->Now() >= deadline) {
      AbortWith(DPL_ERR_TIMEOUT, in_flight_.front().what + " did not finish within " +
                                     TimeoutText(identity_.timeout) + " (waited in " + during +
                                     "): a peer is dead, stuck, or called other collectives");
    }
    waiter_->Pause(round);
  }
}

void CollectiveEngine::AbortWith(dpl_status status, const std::string& what) {
  abort_reason_ = what;
  AbortQuietly();
  throw PluginError(status, Rank() + ": " + what + "; the NCCL communicator was aborted");
}

void CollectiveEngine::AbortQuietly() {
  if (aborted_) return;
  aborted_ = true;
  communicator_->Abort();  // first, so that kernels waiting on a peer return
  ReleaseAll();
}

void CollectiveEngine::ReleaseAll() {
  for (const InFlight& entry : in_flight_) queue_->Release(entry.marker);
  in_flight_.clear();
}

void CollectiveEngine::Log(dpl_log_level level, const std::string& message) const {
  if (log_) log_(level, message);
}

void CollectiveEngine::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (aborted_) return;  // ncclCommAbort freed the communicator already
  if (abort_requested_.load(std::memory_order_acquire)) {
    try {
      AbortQuietly();  // Note [Abort from another thread]: no finalize, it waits for the peers
    } catch (...) {    // Shutdown never throws (destroy "never fails")
    }
    return;
  }
  try {
    const Progress finalizing = communicator_->Finalize();
    std::string problem;
    if (finalizing.failed()) problem = "finalizing it failed: " + finalizing.error;
    const auto deadline = waiter_->Now() + identity_.timeout;
    for (int round = 0; problem.empty(); ++round) {
      const Progress state = communicator_->State();
      if (state.done()) {
        ReleaseAll();
        communicator_->Destroy();
        return;
      }
      if (state.failed()) {
        problem = "it reported an error while finalizing: " + state.error;
      } else if (waiter_->Now() >= deadline) {
        problem = "finalizing it did not finish within " + TimeoutText(identity_.timeout);
      } else {
        waiter_->Pause(round);
      }
    }
    Log(DPL_LOG_WARNING, Rank() + ": the NCCL communicator was aborted at shutdown: " + problem);
  } catch (const std::exception& error) {
    Log(DPL_LOG_WARNING,
        Rank() + ": the NCCL communicator was aborted at shutdown: " + std::string(error.what()));
  }
  try {
    AbortQuietly();
  } catch (...) {  // Shutdown never throws (destroy "never fails")
  }
}

}  // namespace dpl::nccl
