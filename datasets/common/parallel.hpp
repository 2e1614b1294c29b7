// Work spread over up to config->num_threads threads inside one plugin call.
#pragma once

#include <cstdint>
#include <functional>

namespace dpl::datasets {

// Runs body(i) for every i in [0, count) on up to `threads` threads, the calling one among them.
// The threads are started for this call and joined before it returns: none outlives a call (the
// launcher forks its workers from the process that loaded the plugins). When bodies throw, the
// exception of the LOWEST failing index is rethrown once every thread has stopped, so which error
// is reported does not depend on timing; indices above a failure may be skipped.
void ParallelFor(int threads, int64_t count, const std::function<void(int64_t)>& body);

}  // namespace dpl::datasets

namespace dpl::datasets {

// Threads worth starting for a batch of `elements` output values: one below about a quarter of a
// million (starting a thread costs more than it saves there), else up to `max_threads`.
inline int ThreadsForElements(int64_t elements, int max_threads) {
  constexpr int64_t kElementsPerThread = int64_t{1} << 18;
  const int64_t wanted = elements / kElementsPerThread;
  return int(wanted < 1 ? 1 : (wanted < max_threads ? wanted : max_threads));
}

}  // namespace dpl::datasets
