// A float32 buffer in host memory that a function reads, or changes in place, without owning it:
// one parameter's gradient, say (C++17 has no std::span).
#pragma once

#include <cstddef>

namespace dpl::training {

struct FloatSpan {
  float* data = nullptr;
  size_t size = 0;  // elements
};

}  // namespace dpl::training
