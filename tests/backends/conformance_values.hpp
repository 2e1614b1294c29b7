// Values the backend tests reduce and check: the dtypes and ops swept, each rank's inputs, the
// exact expected results and their float tolerances, shared by the conformance suite and the
// nccl backend's GPU tests.
#pragma once

#include <dlpack/dlpack.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend_loader.hpp"
#include "dpl/backend_v4.h"
#include "dpl/support/half.hpp"
#include "dpl/support/tensor.hpp"

namespace dpl::testing::values {

using dpl::support::ElementType;

inline bool plugin_built(const std::string& backend) {
  struct stat info;
  return ::stat(dpl::testing::plugin_path(backend, DPL_TEST_PLUGIN_DIR).c_str(), &info) == 0;
}

struct DtypeCase {
  const char* name;
  DLDataType dtype;
  ElementType type;
};

inline const DtypeCase kDtypes[] = {
    {"float32", {kDLFloat, 32, 1}, ElementType::kFloat32},
    {"float64", {kDLFloat, 64, 1}, ElementType::kFloat64},
    {"int32", {kDLInt, 32, 1}, ElementType::kInt32},
    {"int64", {kDLInt, 64, 1}, ElementType::kInt64},
    {"float16", {kDLFloat, 16, 1}, ElementType::kFloat16},
    {"bfloat16", {kDLBfloat, 16, 1}, ElementType::kBFloat16},
};
inline const dpl_reduce_op kOps[] = {DPL_REDUCE_SUM, DPL_REDUCE_AVG, DPL_REDUCE_MIN,
                                     DPL_REDUCE_MAX};

// Small integers in [-8, 8]: sums over 4 ranks stay exact in every dtype, so the expected
// results are exact and the float tolerance only covers avg's division.
inline double input_value(int rank, size_t index) {
  return static_cast<double>(static_cast<int>((index * 7 + static_cast<size_t>(rank) * 3) % 17) -
                             8);
}

inline void store_value(ElementType type, void* data, size_t i, double value) {
  switch (type) {
    case ElementType::kFloat32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      break;
    case ElementType::kFloat64:
      static_cast<double*>(data)[i] = value;
      break;
    case ElementType::kInt32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(value);
      break;
    case ElementType::kInt64:
      static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value);
      break;
    case ElementType::kFloat16:
      static_cast<uint16_t*>(data)[i] = dpl::support::FloatToHalf(static_cast<float>(value));
      break;
    case ElementType::kBFloat16:
      static_cast<uint16_t*>(data)[i] = dpl::support::FloatToBfloat16(static_cast<float>(value));
      break;
    default:
      break;
  }
}

inline double load_value(ElementType type, const void* data, size_t i) {
  switch (type) {
    case ElementType::kFloat32:
      return static_cast<const float*>(data)[i];
    case ElementType::kFloat64:
      return static_cast<const double*>(data)[i];
    case ElementType::kInt32:
      return static_cast<const int32_t*>(data)[i];
    case ElementType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case ElementType::kFloat16:
      return dpl::support::HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case ElementType::kBFloat16:
      return dpl::support::Bfloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    default:
      return 0;
  }
}

inline bool is_integer(ElementType type) {
  return type == ElementType::kInt32 || type == ElementType::kInt64;
}

inline double expected_value(ElementType type, dpl_reduce_op op, int world, size_t index) {
  double sum = 0, low = 1e30, high = -1e30;
  for (int r = 0; r < world; ++r) {
    const double v = input_value(r, index);
    sum += v;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  switch (op) {
    case DPL_REDUCE_SUM:
      return sum;
    case DPL_REDUCE_MIN:
      return low;
    case DPL_REDUCE_MAX:
      return high;
    case DPL_REDUCE_AVG:
      return is_integer(type) ? static_cast<double>(static_cast<int64_t>(sum) / world)
                              : sum / world;
  }
  return 0;
}

inline double tolerance(ElementType type, double expected) {
  const double scale = std::max(1.0, std::fabs(expected));
  switch (type) {
    case ElementType::kFloat32:
      return 1e-6 * scale;
    case ElementType::kFloat64:
      return 1e-12 * scale;
    case ElementType::kFloat16:
      return 1e-3 * scale;
    case ElementType::kBFloat16:
      return 8e-3 * scale;
    default:
      return 0;
  }
}

}  // namespace dpl::testing::values
