#include "cluster/decimal.hpp"

namespace dpl::cluster {

std::optional<int64_t> ParseDecimal(std::string_view text, int64_t max) {
  constexpr size_t kMaxDigits = 18;  // below 2^63 whatever the digits
  if (text.empty() || text.size() > kMaxDigits) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

}  // namespace dpl::cluster
