// Flag values from text, one message style everywhere: the flag (or the environment variable)
// named by `label`, the allowed range or values, and what was given. All errors are
// DPL_ERR_INVALID_ARGUMENT.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/config.hpp"

namespace dpl::cli {

// The whole text must be an integer in [min, max].
Status ParseInteger(const std::string& label, const std::string& text, int64_t min, int64_t max,
                    int64_t* out);
Status ParseUnsigned64(const std::string& label, const std::string& text, uint64_t* out);
// A finite number for which `in_range` holds; `range` says which in words ("greater than 0").
Status ParseReal(const std::string& label, const std::string& text, const std::string& range,
                 bool (*in_range)(double), double* out);
// Seconds from 0.001 to a week, to the millisecond.
Status ParseSeconds(const std::string& label, const std::string& text,
                    std::chrono::milliseconds* out);
// true for true|1|yes|on, false for false|0|no|off (a switch's value in a config file).
Status ParseBool(const std::string& label, const std::string& text, bool* out);
Status ParseNonEmpty(const std::string& label, const std::string& text, std::string* out);

// One of the spellings of a choice ("--device must be one of cpu|cuda (got 'tpu')").
template <typename Enum>
Status ParseChoice(const std::string& label, const std::string& text,
                   const training::Spellings<Enum>& choices, Enum* out) {
  std::string allowed;
  for (const auto& [name, value] : choices) {
    if (text == name) {
      *out = value;
      return Status::Ok();
    }
    allowed += (allowed.empty() ? "" : "|") + std::string(name);
  }
  return Status::InvalidArgument(label + " must be one of " + allowed + " (got '" + text + "')");
}

// A number as text that parses back to exactly the same double.
std::string ExactText(double value);

}  // namespace dpl::cli
