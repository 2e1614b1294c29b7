#include "cli/values.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dpl::cli {
namespace {

constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;

std::string Quoted(const std::string& text) {
  return "'" + text + "'";
}

}  // namespace

Status ParseInteger(const std::string& label, const std::string& text, int64_t min, int64_t max,
                    int64_t* out) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, value);
  const std::string range = "between " + std::to_string(min) + " and " + std::to_string(max);
  if (text.empty() || error == std::errc::invalid_argument || rest != end) {
    return Status::InvalidArgument(label + " must be an integer " + range + " (got " +
                                   Quoted(text) + ")");
  }
  if (error == std::errc::result_out_of_range || value < min || value > max) {
    return Status::InvalidArgument(label + " must be " + range + " (got " + text + ")");
  }
  *out = value;
  return Status::Ok();
}

Status ParseUnsigned64(const std::string& label, const std::string& text, uint64_t* out) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || rest != end) {
    return Status::InvalidArgument(label + " must be an integer between 0 and " +
                                   std::to_string(std::numeric_limits<uint64_t>::max()) + " (got " +
                                   Quoted(text) + ")");
  }
  *out = value;
  return Status::Ok();
}

Status ParseReal(const std::string& label, const std::string& text, const std::string& range,
                 bool (*in_range)(double), double* out) {
  errno = 0;
  char* rest = nullptr;
  const double value = std::strtod(text.c_str(), &rest);
  // strtod also reads C's hexadecimal floats (0x10 is 16), which no one means by a rate.
  const bool hexadecimal = text.find_first_of("xX") != std::string::npos;
  if (text.empty() || rest != text.c_str() + text.size() || errno == ERANGE ||
      !std::isfinite(value) || hexadecimal) {
    return Status::InvalidArgument(label + " must be a number " + range + " (got " + Quoted(text) +
                                   ")");
  }
  if (!in_range(value)) {
    return Status::InvalidArgument(label + " must be " + range + " (got " + text + ")");
  }
  *out = value;
  return Status::Ok();
}

Status ParseSeconds(const std::string& label, const std::string& text,
                    std::chrono::milliseconds* out) {
  double seconds = 0;
  DPL_RETURN_IF_ERROR(ParseReal(
      label, text, "seconds, at least 0.001 and at most 604800",
      [](double v) { return v >= 0.001 && v <= kMaxTimeoutSeconds; }, &seconds));
  *out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
  return Status::Ok();
}

Status ParseBool(const std::string& label, const std::string& text, bool* out) {
  for (const char* yes : {"true", "1", "yes", "on"}) {
    if (text == yes) {
      *out = true;
      return Status::Ok();
    }
  }
  for (const char* no : {"false", "0", "no", "off"}) {
    if (text == no) {
      *out = false;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument(label + " must be true or false (got " + Quoted(text) + ")");
}

Status ParseNonEmpty(const std::string& label, const std::string& text, std::string* out) {
  if (text.empty()) return Status::InvalidArgument(label + " must not be empty");
  *out = text;
  return Status::Ok();
}

std::string ExactText(double value) {
  // The shortest of %.15g..%.17g that reads back as `value`: 0.1, not 0.10000000000000001.
  char buffer[64];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

}  // namespace dpl::cli
