// Numbers in the training messages: as printf's %g writes them (0.5, 1e-08, 65536), and shapes
// as "(128, 784)" ("()" for a scalar).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dpl::training {

inline std::string NumberText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

}  // namespace dpl::training
