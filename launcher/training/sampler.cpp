#include "training/sampler.hpp"

#include <numeric>
#include <string>

namespace dpl::training {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<int64_t> Permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), int64_t{0});
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    // Modulo bias is below 2^-40 for data set sizes; determinism matters more than perfection.
    const int64_t j = int64_t(SplitMix64(state) % uint64_t(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       uint64_t seed, ShuffleMode shuffle, RemainderMode remainder)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      seed_(seed),
      shuffle_(shuffle) {
  samples_per_rank_ = remainder == RemainderMode::kDrop
                          ? dataset_size / world_size
                          : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::EpochIndices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (shuffle_ == ShuffleMode::kShuffle) {
    order = Permutation(dataset_size_, seed_ + uint64_t(epoch));
  } else {
    order.resize(dataset_size_);
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = samples_per_rank_ * world_size_;
  // Pad by repeating the start, as often as needed (torch does the same for tiny data sets).
  for (int64_t i = 0; int64_t(order.size()) < total && dataset_size_ > 0; ++i) {
    order.push_back(order[i]);
  }
  order.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(samples_per_rank_);
  for (int64_t position = rank_; position < total; position += world_size_) {
    mine.push_back(order[position]);
  }
  return mine;
}

Result<int> PerRankBatchSize(int global_batch_size, int world_size) {
  if (global_batch_size <= 0 || global_batch_size % world_size != 0) {
    return Status::Error(
        "--batch-size " + std::to_string(global_batch_size) +
        " is the global batch and must be a positive multiple of the world size " +
        std::to_string(world_size) + "; pass e.g. --batch-size " +
        std::to_string(world_size *
                       ((global_batch_size > world_size ? global_batch_size / world_size : 1))));
  }
  return global_batch_size / world_size;
}

}  // namespace dpl::training
