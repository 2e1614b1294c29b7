// Element-wise reductions over raw buffers, dispatched by dtype and op. Shared by the plugins
// that reduce on the host (tcp). float16/bfloat16 are reduced in float32 and rounded back.
#pragma once

#include <cstdint>
#include <cstring>

#include "plugin_support.hpp"

namespace dpl::plugin {

// IEEE half <-> float, round-to-nearest-even; no dependency on compiler _Float16 support.
float half_to_float(uint16_t half);
uint16_t float_to_half(float value);
inline float bfloat16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}
uint16_t float_to_bfloat16(float value);

// target[i] = op(target[i], source[i]) for `count` elements of `type`. `op` AVG reduces as SUM
// (the caller divides once at the end with `divide_in_place`). Throws PluginError(UNSUPPORTED)
// for an element type it does not know.
void reduce_into(ElementType type, dpl_reduce_op op, void* target, const void* source,
                 size_t count);
// data[i] /= divisor (integers truncate toward zero), for AVG.
void divide_in_place(ElementType type, void* data, size_t count, int divisor);

}  // namespace dpl::plugin
