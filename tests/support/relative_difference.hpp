// How far two parameter vectors are apart, for tests that compare two paths of the same
// arithmetic to float rounding (the optimizer on the model's device against the host's).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace dpl::testing {

// ||a - b|| / ||b|| over the common length (||a - b|| when b is zero). Norm-wise rather than
// element-wise: near zero, a last-bit difference of a fused multiply-add would weigh as much as a
// wrong update.
inline double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0.0, norm = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    difference += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    norm += double(b[i]) * double(b[i]);
  }
  return norm > 0.0 ? std::sqrt(difference / norm) : std::sqrt(difference);
}

}  // namespace dpl::testing
