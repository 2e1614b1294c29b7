// torch.utils.data.DistributedSampler semantics: one permutation per epoch from seed + epoch,
// the same on every rank (it need not equal torch's RNG stream), padded to a multiple of the
// world size by repeating its start (or truncated with drop_last), and rank r takes positions
// r, r + W, r + 2W, ...
//
// Note [Global sample position]: the epoch's order is of samples (never of files or shards) and
// does not depend on the world size. With a per-rank batch of B / W (B the global batch), batch b
// of every rank holds positions r + W * (b * B / W + k), so batch b of all ranks together is
// positions [b * B, (b + 1) * B) of the order whatever W is. A checkpoint's (epoch, batch) thus
// names the global position of the next sample, and a run resumed from it at the same or another
// world size (--batch-size must match on resume) continues at exactly that sample; only the
// padding of the epoch's last batch depends on W. tests/training/sampler_test.cpp and
// tests/datasets/webdataset_jobs_test.cpp check it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.hpp"

namespace dpl::training {

enum class ShuffleMode { kShuffle, kSequential };
enum class RemainderMode { kPad, kDrop };

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, uint64_t seed,
                     ShuffleMode shuffle, RemainderMode remainder);

  // Samples this rank sees per epoch (the same on every rank).
  int64_t samples_per_rank() const { return samples_per_rank_; }
  // This rank's dataset indices for `epoch`, in order.
  std::vector<int64_t> EpochIndices(int64_t epoch) const;

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  uint64_t seed_;
  ShuffleMode shuffle_;
  int64_t samples_per_rank_;
};

// The identical-on-every-platform permutation of [0, n) for `seed` (splitmix64 + Fisher-Yates).
std::vector<int64_t> Permutation(int64_t n, uint64_t seed);

// Per-rank batch = global batch / world size; the error says both numbers when not divisible.
Result<int> PerRankBatchSize(int global_batch_size, int world_size);

}  // namespace dpl::training
