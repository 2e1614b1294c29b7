#include "common/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace dpl::datasets {

void ParallelFor(int threads, int64_t count, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  std::atomic<int64_t> next{0};
  // Indices are handed out in increasing order, so every index below a failure has been handed
  // out, and runs to its end, before any thread sees the failure and stops.
  std::atomic<int64_t> first_failure{std::numeric_limits<int64_t>::max()};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= count || i > first_failure.load()) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (i < first_failure.load()) {
          first_failure.store(i);
          failure = std::current_exception();
        }
      }
    }
  };
  const int64_t extra_threads = std::min<int64_t>(std::max(threads, 1), count) - 1;
  std::vector<std::thread> pool;
  pool.reserve(size_t(extra_threads));
  try {
    for (int64_t t = 0; t < extra_threads; ++t) pool.emplace_back(work);
  } catch (...) {  // no thread to be had: the ones started and this one do the work
  }
  work();
  for (auto& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace dpl::datasets
