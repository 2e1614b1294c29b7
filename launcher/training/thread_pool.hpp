// The worker's threads for the host's own loops (the optimizer step, the gradients' partial sums):
// --threads-per-worker of them, the caller's thread one of them. They sleep while the model
// computes, whose own threads sleep while these work.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dpl::training {

class ThreadPool {
 public:
  // `threads` >= 1 in all, the caller's included.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }
  // Calls body(begin, end) on consecutive ranges that cover [0, count), in parallel, each at least
  // `grain` long (fewer ranges than threads for a small count); returns when all are done. Which
  // thread runs which range is the only thing that varies: a body whose ranges are independent
  // gives the same results on any number of threads.
  void ParallelFor(size_t count, size_t grain, const std::function<void(size_t, size_t)>& body);

 private:
  void Loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  std::vector<std::pair<size_t, size_t>> ranges_;  // per worker thread; empty range: nothing
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stopping_ = false;
};

}  // namespace dpl::training
