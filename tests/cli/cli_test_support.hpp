// What the CLI tests share: parsing a command line given as words, and the message of one that
// is refused.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/options.hpp"

namespace dpl::cli {

// ParseCommandLine of `launcher <arguments...>`.
inline Result<Options> Parse(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "launcher");
  std::vector<const char*> argv;
  for (const auto& argument : arguments) argv.push_back(argument.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

// The message refusing `arguments`; fails the test (and returns "") when they are accepted.
inline std::string ErrorOf(std::vector<std::string> arguments) {
  auto options = Parse(std::move(arguments));
  EXPECT_FALSE(options.ok()) << "parsed, but should be refused";
  return options.ok() ? "" : options.status().message();
}

}  // namespace dpl::cli
