#include "training/collectives/communication_thread.hpp"

#include <chrono>

#include "observability/stall_monitor.hpp"
#include "observability/tracer.hpp"

namespace dpl::training {

CommunicationThread::CommunicationThread(std::shared_ptr<AbortSignal> abort)
    : abort_(std::move(abort)), thread_([this] { Loop(); }) {}

CommunicationThread::~CommunicationThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::future<Status> CommunicationThread::Submit(std::function<Status()> task,
                                                const observability::CollectiveActivity& activity) {
  Task queued{std::move(task), activity, std::chrono::steady_clock::now(), {}};
  std::future<Status> result = queued.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(queued));
  }
  wake_.notify_one();
  return result;
}

void CommunicationThread::Execute(Task& task) {
  // Note [Aborting collectives]: what is queued after an abort ends without running.
  if (abort_->raised()) return task.done.set_value(abort_->why());
  using Clock = std::chrono::steady_clock;
  observability::StallMonitor& monitor = observability::StallMonitor::Global();
  const Clock::time_point start = Clock::now();
  monitor.Begin(task.activity);
  Status status = task.run();
  monitor.End(status.ok());
  observability::Tracer::Global().Collective(task.activity, task.submitted, start, Clock::now(),
                                             status.ok());
  task.done.set_value(std::move(status));
}

void CommunicationThread::Loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    Execute(task);
  }
}

}  // namespace dpl::training
