// --keep-checkpoints and --check-replicas: their defaults, values, what workers get, and which
// must agree where (Note [Flags that must agree]).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cli/flags.hpp"
#include "cli/options.hpp"
#include "cli_test_support.hpp"

namespace dpl::cli {
namespace {

TEST(ChecksAndRetentionFlags, DefaultsKeepFiveAndCheckNothing) {
  auto options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_EQ(options->training.keep_checkpoints, 5);
  EXPECT_EQ(options->training.check_replicas, 0);
}

TEST(ChecksAndRetentionFlags, ValuesReachTheWorkers) {
  auto options = Parse({"--keep-checkpoints", "0", "--check-replicas", "10"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  auto worker = Parse(WorkerArguments(*options, 0, "127.0.0.1:1"));
  ASSERT_TRUE(worker.ok()) << worker.status().message();
  for (const Options* o : {&*options, &*worker}) {
    EXPECT_EQ(o->training.keep_checkpoints, 0);
    EXPECT_EQ(o->training.check_replicas, 10);
  }
  auto two = Parse({"--keep-checkpoints", "2"});
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(Parse(WorkerArguments(*two, 0, "127.0.0.1:1"))->training.keep_checkpoints, 2);
}

TEST(ChecksAndRetentionFlags, BadValuesNameTheRange) {
  EXPECT_EQ(ErrorOf({"--keep-checkpoints", "-1"}),
            "--keep-checkpoints must be between 0 and 2147483647 (got -1)");
  EXPECT_EQ(ErrorOf({"--keep-checkpoints", "all"}),
            "--keep-checkpoints must be an integer between 0 and 2147483647 (got 'all')");
  EXPECT_EQ(ErrorOf({"--check-replicas", "-5"}),
            "--check-replicas must be between 0 and 9223372036854775807 (got -5)");
}

// The replica check is a collective at the same steps on every rank, so every machine must give
// the same interval; retention is rank 0's business alone. Neither changes the trained values.
TEST(ChecksAndRetentionFlags, OnlyTheCheckMustAgreeAcrossMachines) {
  auto options = Parse({"--check-replicas", "7", "--keep-checkpoints", "3"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  std::map<std::string, std::string> machines;
  for (const auto& [name, value] : SettingsThatMustMatch(*options)) machines[name] = value;
  EXPECT_EQ(machines.at("--check-replicas"), "7");
  EXPECT_EQ(machines.count("--keep-checkpoints"), 0u);
  for (const training::ResumeSetting& setting : options->training.resume_settings) {
    EXPECT_NE(setting.flag, "--check-replicas");
    EXPECT_NE(setting.flag, "--keep-checkpoints");
  }
}

}  // namespace
}  // namespace dpl::cli
