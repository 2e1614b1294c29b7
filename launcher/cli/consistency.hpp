// The checks of the command line that involve more than one flag (consistency.cpp).
#pragma once

#include <string>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"

namespace dpl::cli {

// Ok when the flags fit together; else the first conflict, saying what to change.
Status CheckConsistency(const Options& options);

// The flags given that change nothing in this job, each with why ("--momentum has no effect
// with --optimizer adam: only sgd uses it"), for the launcher to warn of at its start: a value a
// user set and believes in, silently dropped, is a wrong experiment.
std::vector<std::string> FlagsWithoutEffect(const Options& options);

}  // namespace dpl::cli
