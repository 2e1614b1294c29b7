#include "training/thread_pool.hpp"

#include <algorithm>

namespace dpl::training {

ThreadPool::ThreadPool(int threads) {
  ranges_.resize(size_t(std::max(threads, 1) - 1));
  for (size_t i = 0; i < ranges_.size(); ++i) workers_.emplace_back([this, i] { Loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::ParallelFor(size_t count, size_t grain,
                             const std::function<void(size_t, size_t)>& body) {
  const size_t most = std::max<size_t>(1, count / std::max<size_t>(grain, 1));
  const size_t parts = std::min(size_t(threads()), most);
  if (parts <= 1 || count == 0) {
    if (count > 0) body(0, count);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    for (size_t i = 0; i < ranges_.size(); ++i) {
      const size_t part = i + 1;  // part 0 is the caller's
      ranges_[i] = part < parts ? std::make_pair(count * part / parts, count * (part + 1) / parts)
                                : std::make_pair(size_t(0), size_t(0));
    }
    pending_ = ranges_.size();
    ++generation_;
  }
  wake_.notify_all();
  body(0, count / parts);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
}

void ThreadPool::Loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    std::pair<size_t, size_t> range;
    const std::function<void(size_t, size_t)>* body;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      range = ranges_[index];
      body = body_;
    }
    if (range.second > range.first) (*body)(range.first, range.second);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace dpl::training
