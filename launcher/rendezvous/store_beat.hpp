// A counter in the store that a thread bumps at a fixed interval: how a launcher shows that it is
// alive (the members of an elastic job, the root cause of a failure).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// Adds 1 to `key` every `interval`, from a thread of its own, until Stop() or destruction. A
// failed Add ends the beating: whoever else uses the store learns of its loss from its own calls.
// `client` must outlive the beat.
class StoreBeat {
 public:
  StoreBeat(StoreClient& client, std::string key, std::chrono::milliseconds interval);
  ~StoreBeat();
  StoreBeat(const StoreBeat&) = delete;
  StoreBeat& operator=(const StoreBeat&) = delete;

  // Stops the thread; returns once it has (its last Add is done). Idempotent.
  void Stop();

 private:
  void Run();

  StoreClient& client_;
  const std::string key_;
  const std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace dpl::rendezvous
