// The worker's command line: what a launcher builds is what the flag table reads back.
#include "protocol/worker_command.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/options.hpp"

namespace dpl::protocol {
namespace {

// ParseCommandLine of `command`, executable included, as the started process sees its argv.
Result<cli::Options> ParseCommand(const std::vector<std::string>& command) {
  std::vector<const char*> argv;
  for (const std::string& argument : command) argv.push_back(argument.c_str());
  return cli::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

cli::Options JobOptions() {
  std::vector<const char*> argv = {
      "launcher", "--num-processes", "3",  "--batch-size", "96",    "--backend", "tcp", "--lr",
      "0.125",    "--plugin-dir",    "/p", "--job-token",  "secret"};
  auto options = cli::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  EXPECT_TRUE(options.ok()) << options.status().message();
  return options.ok() ? *options : cli::Options();
}

TEST(WorkerCommand, StartsTheLauncherItselfAsOneWorker) {
  const std::vector<std::string> job_flags = cli::LauncherArguments(JobOptions());
  const std::vector<std::string> command = WorkerCommand(job_flags, 2, "10.0.0.1:29500");
  ASSERT_GE(command.size(), 6u);
  EXPECT_EQ(command[0], "/proc/self/exe");
  EXPECT_EQ(std::vector<std::string>(command.begin() + 1, command.begin() + 6),
            (std::vector<std::string>{"--worker", "--local-rank", "2", "--store-addr",
                                      "10.0.0.1:29500"}));
  EXPECT_EQ(std::vector<std::string>(command.begin() + 6, command.end()), job_flags);
  auto worker = ParseCommand(command);
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  EXPECT_EQ(worker->command, cli::Command::kWorker);
  EXPECT_EQ(worker->local_rank, 2);
  EXPECT_EQ(worker->store_addr, "10.0.0.1:29500");
  EXPECT_EQ(worker->num_processes, 3);
  EXPECT_EQ(worker->backend, "tcp");
  EXPECT_EQ(worker->training.optimizer.learning_rate, 0.125);
  EXPECT_EQ(worker->plugin_dirs, std::vector<std::string>{"/p"});
  EXPECT_TRUE(worker->worker_output_fds.empty());
  EXPECT_EQ(worker->job_token, "");  // never in argv: workers get it in their environment
}

TEST(WorkerCommand, StartsTheWorkerLoaderWithOneOutputPerWorker) {
  const std::vector<std::string> command =
      WorkerLoaderCommand(cli::LauncherArguments(JobOptions()), {7, 9, 11}, "127.0.0.1:4000");
  EXPECT_EQ(command[0], kSelfExecutable);
  EXPECT_EQ(command[3], "7,9,11");
  auto loader = ParseCommand(command);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  EXPECT_EQ(loader->command, cli::Command::kWorker);
  EXPECT_EQ(loader->worker_output_fds, (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(loader->local_rank, -1);
  EXPECT_EQ(loader->store_addr, "127.0.0.1:4000");
  EXPECT_EQ(loader->training.batch_size, 96);
}

TEST(WorkerCommand, ItsFlagsAreTheTableInternalOnes) {
  for (const char* name : {kWorkerFlag, kLocalRankFlag, kWorkerOutputsFlag, kStoreAddrFlag}) {
    std::vector<const char*> argv = {"launcher", "--num-processes", "2"};
    const std::string flag = std::string("--") + name;
    argv.push_back(flag.c_str());
    if (std::string(name) != kWorkerFlag) argv.push_back("1");
    auto options = cli::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
    if (std::string(name) == kWorkerFlag) {
      ASSERT_FALSE(options.ok());
      EXPECT_EQ(options.status().message(), "--worker needs --local-rank or --worker-outputs");
    } else {
      ASSERT_FALSE(options.ok()) << flag;
      EXPECT_EQ(options.status().message(), flag + " is internal and only valid with --worker");
    }
  }
}

}  // namespace
}  // namespace dpl::protocol
