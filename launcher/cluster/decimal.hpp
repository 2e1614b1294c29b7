// Strict decimal numbers for the cluster parsers: digits only, no sign, no spaces, no base
// prefixes, so that "+3", " 3", "0x10" and "3abc" are refused the same way everywhere (strtol and
// friends accept most of them).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dpl::cluster {

// The value of `text` if it is 1 to 18 decimal digits and at most `max`; nothing otherwise.
std::optional<int64_t> ParseDecimal(std::string_view text, int64_t max);

}  // namespace dpl::cluster
