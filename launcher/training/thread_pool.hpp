// The worker's threads for the host's own loops (the optimizer step, the gradients' partial sums):
// --threads-per-worker of them, the caller's thread one of them.
//
// Note [One thread team]: the loops run as OpenMP parallel regions, on the same libgomp thread
// team as the model's libtorch kernels (one libgomp in the process: the launcher and Debian's
// libtorch both load libgomp.so.1). After each of its parallel regions libgomp's threads spin for
// a while before they sleep; threads of our own would compete with them for the cores just when
// the optimizer starts. Measured on the 10M-parameter MLP at 1 process x 2 threads (2 cores):
// the optimizer took 12-13 ms a step with a pool of our own, as long as on one thread, and
// 6.4-7.8 ms on the team. A model whose libtorch brings its own OpenMP runtime (pip's torch
// bundles a renamed libgomp) gets a team of ours beside its own, as before.
#pragma once

#include <cstddef>
#include <functional>

namespace dpl::training {

class ThreadPool {
 public:
  // `threads` >= 1 in all, the caller's included.
  explicit ThreadPool(int threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  // Calls body(begin, end) on consecutive ranges that cover [0, count), in parallel, each at least
  // `grain` long (fewer ranges than threads for a small count); returns when all are done. Which
  // thread runs which range is the only thing that varies: a body whose ranges are independent
  // gives the same results on any number of threads. `body` must not throw.
  void ParallelFor(size_t count, size_t grain, const std::function<void(size_t, size_t)>& body);

 private:
  int threads_;
};

}  // namespace dpl::training
