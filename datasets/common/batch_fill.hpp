// The fill every plugin whose samples sit in memory (or memory-mapped) shares: each sample of the
// batch through the split's transform, and its label, on the threads the batch is worth.
#pragma once

#include <cstdint>

#include "common/parallel.hpp"
#include "common/sample_transform.hpp"

namespace dpl::datasets {

// Writes samples indices[0..n) of `epoch` through `transform` to input[i * transform.elements()
// ..] and their labels to labels[i], on up to `max_threads` threads (ThreadsForElements).
// sample_at(index) is where the stored sample `index` starts (what SampleTransform::Apply reads);
// label_at(index) is its label. Both are called from several threads at once.
template <typename SampleAt, typename LabelAt>
void FillTransformedBatch(const SampleTransform& transform, int max_threads, const int64_t* indices,
                          int64_t n, int64_t epoch, float* input, int64_t* labels,
                          const SampleAt& sample_at, const LabelAt& label_at) {
  const int64_t elements = transform.elements();
  ParallelFor(ThreadsForElements(n * elements, max_threads), n, [&](int64_t i) {
    const int64_t index = indices[i];
    transform.Apply(sample_at(index), index, epoch, input + i * elements);
    labels[i] = label_at(index);
  });
}

}  // namespace dpl::datasets
