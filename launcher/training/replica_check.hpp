// --check-replicas N: every N optimizer steps the ranks compare a 64-bit hash of their parameters.
//
// Note [Replica check]: dpl's replicas are bit-identical by construction -- every rank starts
// from rank 0's broadcast parameters and applies the same optimizer arithmetic to the same
// averaged gradients -- so any difference is a fault: a model plugin that changes parameters
// outside the optimizer step or computes them differently by rank, a backend that hands ranks
// different sums, faulty memory. Such a fault is silent otherwise: the ranks train on, each its
// own model, and rank 0's checkpoints and export hold one of them. The check hashes the
// parameters' bits (XXH64 of each tensor in parameter order, then of those hashes) and gathers one
// 64-bit hash from every rank through the front's GatherWords (the backend's allgather, 8 bytes a
// rank; the store for a backend that moves device memory only), after the step's update and
// before a checkpoint of the same step is written. When a hash differs, a second gather of the
// per-tensor hashes names the tensors, and every rank fails with the same message: the step, which
// ranks agree with rank 0, which do not, and the last step at which all agreed. The job is not
// restarted (--max-restarts): the usual causes are deterministic and repeat from any checkpoint,
// and a checkpoint written since the last agreement may hold a diverged replica. Its cost is in
// docs/observability.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/placement.hpp"

namespace dpl::training {

// XXH64 of `bytes` bytes at `data` with `seed` (the xxHash specification's XXH64).
uint64_t Xxh64(const void* data, size_t bytes, uint64_t seed);

// The hash of each parameter tensor's bits, in parameter order (seeded with its index).
std::vector<uint64_t> TensorHashes(const std::vector<HostParameter>& parameters);
// The replica's hash: XXH64 of TensorHashes.
uint64_t CombinedHash(const std::vector<uint64_t>& tensor_hashes);

// Gathers `mine` (the same count on every rank) from every rank: world size * mine.size() words
// in rank order (Collectives::GatherWords).
using GatherWords = std::function<Result<std::vector<uint64_t>>(const std::vector<uint64_t>& mine,
                                                                const std::string& name)>;

class ReplicaCheck {
 public:
  // Checks every `every` optimizer steps (0: never) with `gather`.
  ReplicaCheck(int64_t every, int world_size, GatherWords gather);

  // After the optimizer step that made `global_step` steps, when one is due (and the world has
  // more than one rank): Ok when every replica's hash is rank 0's, else a failure that
  // IsReplicaMismatch recognises.
  Status AfterStep(int64_t global_step, const std::vector<HostParameter>& parameters);
  // Whether AfterStep compares the replicas after `global_step`.
  bool DueAfter(int64_t global_step) const {
    return every_ > 0 && world_size_ >= 2 && global_step % every_ == 0;
  }

 private:
  int64_t every_;
  int world_size_;
  GatherWords gather_;
  int64_t last_agreed_ = -1;  // the last step the check passed; -1 before the first
};

// The failure for `hashes` (one per rank) that differ at `step`; `differing_tensors` names, per
// rank, the tensors whose hash is not rank 0's (empty when unknown). For tests, too.
Status ReplicaMismatch(int64_t step, int64_t every, const std::vector<uint64_t>& hashes,
                       const std::vector<std::string>& differing_tensors, int64_t last_agreed);
// Whether `status` is a ReplicaMismatch (the worker's exit code says so to the launcher).
bool IsReplicaMismatch(const Status& status);

}  // namespace dpl::training
