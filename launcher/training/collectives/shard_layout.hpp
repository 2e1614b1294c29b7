// How the gradient buckets are cut into parts: one part per worker of a machine for the reduction
// through shared memory (local_reduce.hpp), one per rank for the sharded optimizer
// (--shard-optimizer, Note [Sharded optimizer] in update_share.hpp).
//
// Note [Bucket layout]: a bucket's elements are its parameters back to back in ascending
// parameter order (the order of the model's memory when its gradients are views of one buffer),
// whatever the order the bucket was launched in. Its parts are consecutive ranges of that flat
// order, as equal as pieces allow.
//
// Note [Pieces]: a piece is kPieceElements consecutive elements of one parameter, counted from
// the parameter's start (its last piece may be shorter). Quantities over all gradients (the norm
// of --clip-grad-norm) are sums of per-piece partial sums added in piece order, and a part never
// splits a piece, so a rank that holds some parts computes the partial sums of exactly its pieces,
// and every world size adds the same numbers in the same order: a sharded run clips by the same
// factor, bit for bit, as an unsharded one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "training/collectives/buckets.hpp"

namespace dpl::training {

inline constexpr size_t kPieceElements = 4096;

// A run (the glossary of docs/architecture.md): elements [offset, offset + elements) of parameter
// `parameter`; in a bucket's part, at `flat` in the bucket's flat order (else 0).
struct ParameterRun {
  uint32_t parameter = 0;
  size_t offset = 0;
  size_t elements = 0;
  size_t flat = 0;
};

struct BucketLayout {
  std::vector<uint32_t> parameters;  // ascending
  std::vector<size_t> starts;        // flat position of each of `parameters`
  size_t elements = 0;
  std::vector<size_t> bounds;  // parts + 1 positions: part j is [bounds[j], bounds[j + 1])
  size_t largest_part = 0;
};

class ShardLayout {
 public:
  ShardLayout() = default;
  // `buckets` over parameters of `parameter_elements` elements, each cut into `parts` parts.
  ShardLayout(const std::vector<size_t>& parameter_elements, const std::vector<Bucket>& buckets,
              int parts);

  int parts() const { return parts_; }
  size_t buckets() const { return buckets_.size(); }
  const BucketLayout& bucket(size_t b) const { return buckets_[b]; }
  // Elements of all buckets.
  size_t elements() const { return elements_; }
  // Part `part` of bucket `b` as runs of parameters, in flat order.
  std::vector<ParameterRun> RunsOf(size_t b, int part) const;
  // Part `part` of every bucket, bucket after bucket.
  std::vector<ParameterRun> PartOfEveryBucket(int part) const;
  // The first piece of each parameter in a list of every parameter's pieces (Note [Pieces]), and
  // the number of pieces in all.
  const std::vector<size_t>& first_piece() const { return first_piece_; }
  size_t pieces() const { return pieces_; }
  // A fingerprint of the layout: workers that must share it compare theirs.
  uint64_t Fingerprint() const;

 private:
  int parts_ = 1;
  std::vector<BucketLayout> buckets_;
  size_t elements_ = 0;
  std::vector<size_t> first_piece_;
  size_t pieces_ = 0;
};

// The pieces of a parameter of `elements` elements.
inline size_t PiecesOf(size_t elements) {
  return (elements + kPieceElements - 1) / kPieceElements;
}

}  // namespace dpl::training
