// Numbers in the training messages, as printf's %g writes them (0.5, 1e-08, 65536).
#pragma once

#include <cstdio>
#include <string>

namespace dpl::training {

inline std::string NumberText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace dpl::training
