#include "training/thread_pool.hpp"

#include <algorithm>

namespace dpl::training {

ThreadPool::ThreadPool(int threads) : threads_(std::max(threads, 1)) {}

void ThreadPool::ParallelFor(size_t count, size_t grain,
                             const std::function<void(size_t, size_t)>& body) {
  const size_t most = std::max<size_t>(1, count / std::max<size_t>(grain, 1));
  const size_t parts = std::min(size_t(threads_), most);
  if (parts <= 1 || count == 0) {
    if (count > 0) body(0, count);
    return;
  }
  // Note [One thread team]: one range per thread of the team libtorch's kernels use.
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (size_t part = 0; part < parts; ++part) {
    body(count * part / parts, count * (part + 1) / parts);
  }
}

}  // namespace dpl::training
