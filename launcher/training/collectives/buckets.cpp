#include "training/collectives/buckets.hpp"

#include <algorithm>

namespace dpl::training {

std::vector<Bucket> AssignBuckets(const std::vector<size_t>& parameter_elements,
                                  int64_t bucket_cap_bytes) {
  std::vector<Bucket> buckets;
  Bucket current;
  for (size_t k = parameter_elements.size(); k-- > 0;) {
    current.parameter_indices.push_back(uint32_t(k));
    current.elements += parameter_elements[k];
    const int64_t cap =
        buckets.empty() ? std::min(kFirstBucketCapBytes, bucket_cap_bytes) : bucket_cap_bytes;
    if (int64_t(current.elements * sizeof(float)) >= cap) {
      buckets.push_back(std::move(current));
      current = Bucket();
    }
  }
  if (!current.parameter_indices.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace dpl::training
