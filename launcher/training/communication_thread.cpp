#include "training/communication_thread.hpp"

#include <chrono>

#include "observability/stall_monitor.hpp"
#include "observability/tracer.hpp"

namespace dpl::training {

CommunicationThread::CommunicationThread() : thread_([this] { Loop(); }) {}

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
  using Clock = std::chrono::steady_clock;
  const Clock::time_point submitted = Clock::now();
  std::packaged_task<Status()> packaged([task = std::move(task), activity, submitted] {
    observability::StallMonitor& monitor = observability::StallMonitor::Global();
    const Clock::time_point start = Clock::now();
    monitor.Begin(activity);
    Status status = task();
    monitor.End(status.ok());
    observability::Tracer::Global().Collective(activity, submitted, start, Clock::now(),
                                               status.ok());
    return status;
  });
  std::future<Status> result = packaged.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(packaged));
  }
  wake_.notify_one();
  return result;
}

void CommunicationThread::Loop() {
  for (;;) {
    std::packaged_task<Status()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace dpl::training
