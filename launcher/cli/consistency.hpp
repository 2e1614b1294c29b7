// The checks of the command line that involve more than one flag (consistency.cpp).
#pragma once

#include "cli/options.hpp"
#include "common/status.hpp"

namespace dpl::cli {

// Ok when the flags fit together; else the first conflict, saying what to change.
Status CheckConsistency(const Options& options);

}  // namespace dpl::cli
