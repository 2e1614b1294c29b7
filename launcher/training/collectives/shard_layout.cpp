#include "training/collectives/shard_layout.hpp"

#include <algorithm>

namespace dpl::training {
namespace {

// The first piece boundary at or after flat position `target` of `layout` (Note [Pieces]).
size_t PieceBoundaryFrom(const BucketLayout& layout, const std::vector<size_t>& sizes,
                         size_t target) {
  for (size_t k = 0; k < layout.parameters.size(); ++k) {
    const size_t start = layout.starts[k], end = start + sizes[layout.parameters[k]];
    if (target >= end) continue;
    if (target <= start) return start;
    const size_t into = (target - start + kPieceElements - 1) / kPieceElements * kPieceElements;
    return std::min(start + into, end);
  }
  return layout.elements;
}

BucketLayout LayOut(const Bucket& bucket, const std::vector<size_t>& sizes, int parts) {
  BucketLayout layout;
  layout.parameters = bucket.parameter_indices;
  std::sort(layout.parameters.begin(), layout.parameters.end());
  for (uint32_t p : layout.parameters) {
    layout.starts.push_back(layout.elements);
    layout.elements += sizes[p];
  }
  layout.bounds.push_back(0);
  for (int j = 1; j < parts; ++j) {
    const size_t target = (layout.elements * size_t(j) + size_t(parts) - 1) / size_t(parts);
    const size_t bound = PieceBoundaryFrom(layout, sizes, target);
    layout.bounds.push_back(std::max(bound, layout.bounds.back()));
  }
  layout.bounds.push_back(layout.elements);
  for (int j = 0; j < parts; ++j) {
    layout.largest_part = std::max(layout.largest_part, layout.bounds[j + 1] - layout.bounds[j]);
  }
  return layout;
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<size_t>& parameter_elements,
                         const std::vector<Bucket>& buckets, int parts)
    : parts_(parts) {
  for (const Bucket& bucket : buckets) {
    buckets_.push_back(LayOut(bucket, parameter_elements, parts));
    elements_ += buckets_.back().elements;
  }
  for (size_t elements : parameter_elements) {
    first_piece_.push_back(pieces_);
    pieces_ += PiecesOf(elements);
  }
}

std::vector<ParameterRun> ShardLayout::RunsOf(size_t b, int part) const {
  const BucketLayout& layout = buckets_[b];
  const size_t begin = layout.bounds[size_t(part)], end = layout.bounds[size_t(part) + 1];
  std::vector<ParameterRun> runs;
  for (size_t k = 0; k < layout.parameters.size() && begin < end; ++k) {
    const size_t start = layout.starts[k];
    const size_t stop = k + 1 < layout.parameters.size() ? layout.starts[k + 1] : layout.elements;
    const size_t from = std::max(begin, start), to = std::min(end, stop);
    if (from >= to) continue;
    runs.push_back(ParameterRun{layout.parameters[k], from - start, to - from, from});
  }
  return runs;
}

std::vector<ParameterRun> ShardLayout::PartOfEveryBucket(int part) const {
  std::vector<ParameterRun> all;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const std::vector<ParameterRun> runs = RunsOf(b, part);
    all.insert(all.end(), runs.begin(), runs.end());
  }
  return all;
}

uint64_t ShardLayout::Fingerprint() const {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the numbers that place every element
  auto mix = [&hash](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte)
      hash = (hash ^ ((value >> (8 * byte)) & 0xff)) * 1099511628211ull;
  };
  mix(uint64_t(parts_));
  for (const BucketLayout& layout : buckets_) {
    mix(layout.elements);
    for (uint32_t p : layout.parameters) mix(p);
    for (size_t bound : layout.bounds) mix(bound);
  }
  return hash;
}

}  // namespace dpl::training
