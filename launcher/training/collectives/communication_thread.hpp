// The thread every collective of a training process runs on (Note [One front for collectives] in
// collectives.hpp): the backend ABI requires a backend's calls to be serialised, and running them
// off the training thread lets gradient buckets be reduced while the backward pass goes on
// (training/gradient_sync.hpp).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "common/status.hpp"
#include "observability/activity.hpp"
#include "training/collectives/abort_signal.hpp"

namespace dpl::training {

// Runs queued tasks one at a time on its own thread. Each task is a collective described by an
// activity: the stall monitor watches it while it runs and the tracer records it from its
// submission to its end (Note [Stall reports], Note [Trace recording]).
class CommunicationThread {
 public:
  // Once `abort` is raised (Abort), queued and later tasks end with its reason without running.
  explicit CommunicationThread(
      std::shared_ptr<AbortSignal> abort = std::make_shared<AbortSignal>());
  ~CommunicationThread();
  CommunicationThread(const CommunicationThread&) = delete;
  CommunicationThread& operator=(const CommunicationThread&) = delete;

  std::future<Status> Submit(std::function<Status()> task,
                             const observability::CollectiveActivity& activity = {});
  // Submits `task` and waits for it: for a caller on another thread (never this one's tasks).
  Status Run(std::function<Status()> task, const observability::CollectiveActivity& activity = {}) {
    return Submit(std::move(task), activity).get();
  }
  // Note [Aborting collectives] in collectives.hpp: raises the signal; from any thread.
  void Abort(const Status& why) { abort_->Raise(why); }
  // The signal, for the waits of the thread's tasks to watch.
  std::shared_ptr<const AbortSignal> abort_signal() const { return abort_; }

 private:
  struct Task {
    std::function<Status()> run;
    observability::CollectiveActivity activity;
    std::chrono::steady_clock::time_point submitted;
    std::promise<Status> done;
  };
  void Loop();
  void Execute(Task& task);

  std::shared_ptr<AbortSignal> abort_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dpl::training
