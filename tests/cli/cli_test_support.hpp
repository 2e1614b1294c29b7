// What the CLI tests share: parsing a command line given as words, the message of one that is
// refused, and the arguments a launcher gives its workers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cli/options.hpp"
#include "protocol/worker_command.hpp"

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

// The arguments of worker `local_rank`'s command line (protocol::WorkerCommand) after the
// executable: what that worker parses.
inline std::vector<std::string> WorkerArguments(const Options& options, int local_rank,
                                                const std::string& store_addr) {
  const std::vector<std::string> command =
      protocol::WorkerCommand(LauncherArguments(options), local_rank, store_addr);
  return std::vector<std::string>(command.begin() + 1, command.end());
}

// The same for the machine's worker loader (protocol::WorkerLoaderCommand).
inline std::vector<std::string> WorkerLoaderArguments(const Options& options,
                                                      const std::vector<int>& output_fds,
                                                      const std::string& store_addr) {
  const std::vector<std::string> command =
      protocol::WorkerLoaderCommand(LauncherArguments(options), output_fds, store_addr);
  return std::vector<std::string>(command.begin() + 1, command.end());
}

}  // namespace dpl::cli
