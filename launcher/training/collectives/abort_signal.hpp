// How a front's collectives are told to stop (Note [Aborting collectives] in collectives.hpp).
#pragma once

#include <atomic>
#include <mutex>

#include "common/status.hpp"

namespace dpl::training {

// Raised once, from any thread; read by every wait of the collectives it was given to.
class AbortSignal {
 public:
  // The first reason wins; later ones are ignored.
  void Raise(const Status& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (raised_.load(std::memory_order_relaxed)) return;
    why_ = why.ok() ? Status::Error("the collectives were aborted") : why;
    raised_.store(true, std::memory_order_release);
  }
  bool raised() const { return raised_.load(std::memory_order_acquire); }
  // Why it was raised; Ok while it is not.
  Status why() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return raised_.load(std::memory_order_relaxed) ? why_ : Status::Ok();
  }

 private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mutex_;
  Status why_ = Status::Ok();
};

}  // namespace dpl::training
