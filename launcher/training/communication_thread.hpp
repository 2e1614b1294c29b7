// The thread every backend call of a training process runs on: the backend ABI requires its calls
// to be serialised, and running them off the training thread lets gradient buckets be reduced
// while the backward pass goes on (gradient_sync.hpp).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "common/status.hpp"
#include "observability/activity.hpp"

namespace dpl::training {

// Runs queued tasks one at a time on its own thread. Each task is a backend call described by an
// activity: the stall monitor watches it while it runs and the tracer records it from its
// submission to its end (Note [Stall reports], Note [Trace recording]).
class CommunicationThread {
 public:
  CommunicationThread();
  ~CommunicationThread();
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;
  std::future<Status> Submit(std::function<Status()> task,
                             const observability::CollectiveActivity& activity = {});

 private:
  void Loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<Status()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dpl::training
