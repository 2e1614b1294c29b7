// The plugin host's refusals seen from the launcher binary: a message, a non-zero exit, no crash.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

const std::string kGood = std::string(DPL_TEST_BINARY_DIR) + "/good";
const std::string kBroken = std::string(DPL_TEST_BINARY_DIR) + "/broken";
const std::string kDuplicateA = std::string(DPL_TEST_BINARY_DIR) + "/duplicate_a";
const std::string kDuplicateB = std::string(DPL_TEST_BINARY_DIR) + "/duplicate_b";
const std::string kThreadAtLoad = std::string(DPL_TEST_BINARY_DIR) + "/thread_at_load";

struct Outcome {
  int wait_status = 0;
  std::string output;  // stdout and stderr together
};

// Runs the launcher with `arguments` (already shell-quoted where needed), no plugin path from
// the environment, and a short timeout so a hang fails the test instead of blocking ctest.
Outcome RunLauncher(const std::string& arguments) {
  const std::string command = "env -u DPL_PLUGIN_PATH timeout 30 '" +
                              std::string(DPL_TEST_LAUNCHER) + "' " + arguments + " 2>&1";
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return outcome;
  }
  std::array<char, 4096> buffer{};
  size_t read = 0;
  while ((read = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    outcome.output.append(buffer.data(), read);
  }
  outcome.wait_status = pclose(pipe);
  return outcome;
}

// The shell reports a child killed by a signal as exit status 128 + signal.
void ExpectCleanFailure(const Outcome& outcome) {
  ASSERT_TRUE(WIFEXITED(outcome.wait_status)) << outcome.output;
  EXPECT_NE(WEXITSTATUS(outcome.wait_status), 0) << outcome.output;
  EXPECT_LT(WEXITSTATUS(outcome.wait_status), 124) << "timed out or killed by a signal\n"
                                                   << outcome.output;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(DPL_TEST_LAUNCHER, X_OK), 0)
        << DPL_TEST_LAUNCHER << " is missing; build the launcher target";
  }
};

TEST_F(LauncherTest, PluginsListsGoodOnes) {
  const Outcome outcome = RunLauncher("plugins --plugin-dir " + kGood);
  ASSERT_TRUE(WIFEXITED(outcome.wait_status)) << outcome.output;
  EXPECT_NE(outcome.output.find("backend  testgood"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("model    testmodel"), std::string::npos) << outcome.output;
}

TEST_F(LauncherTest, PluginsListsEveryRefusalAndFails) {
  const Outcome outcome = RunLauncher("plugins --plugin-dir " + kBroken);
  ExpectCleanFailure(outcome);
  for (const std::string& expected :
       {kBroken + "/libfake.so: not a loadable shared library: " + kBroken +
            "/libfake.so: invalid ELF header",
        kBroken + "/libnosymbol.so: not a dpl plugin: no symbol dpl_backend_plugin_v5, "
                  "dpl_model_plugin_v4 or dpl_dataset_plugin_v2",
        kBroken + "/libabi9.so: backend plugin ABI v9 is newer than this launcher supports "
                  "(v1..v5); upgrade the launcher or rebuild the plugin against SDK v5",
        kBroken + "/libabi0.so: backend plugin ABI v0 is older than this launcher supports "
                  "(v1..v5); rebuild the plugin against SDK v5",
        kBroken + "/libbadmagic.so: symbol dpl_backend_plugin_v1 has bad magic 0x12345678"}) {
    EXPECT_NE(outcome.output.find(expected), std::string::npos) << "missing: " << expected << "\n"
                                                                << outcome.output;
  }
}

TEST_F(LauncherTest, PluginsRefusesDuplicateNames) {
  const Outcome outcome =
      RunLauncher("plugins --plugin-dir " + kDuplicateA + " --plugin-dir " + kDuplicateB);
  ExpectCleanFailure(outcome);
  EXPECT_NE(outcome.output.find("two backend plugins are named 'dup': " + kDuplicateA +
                                "/libdup.so and " + kDuplicateB + "/libdup.so"),
            std::string::npos)
      << outcome.output;
}

TEST_F(LauncherTest, UnknownBackendListsWhatExists) {
  const Outcome outcome =
      RunLauncher("--backend nosuch --num-processes 1 --max-steps 1 --plugin-dir " + kGood);
  ExpectCleanFailure(outcome);
  EXPECT_NE(outcome.output.find("unknown --backend 'nosuch'; the backend plugins found are: "),
            std::string::npos)
      << outcome.output;
  EXPECT_NE(outcome.output.find("testgood"), std::string::npos) << outcome.output;
}

TEST_F(LauncherTest, APluginThatStartsAThreadAtLoadGetsWorkersThatLoadOnTheirOwn) {
  // The workers are not forked from the loader (a copy would miss the plugin's thread); they exec
  // and load on their own, and the job trains as usual.
  const Outcome outcome = RunLauncher(
      "--backend tcp --model mlp --num-processes 2 --max-steps 2 --no-eval --no-progress "
      "--master-port 0 --plugin-dir " +
      kThreadAtLoad);
  EXPECT_TRUE(WIFEXITED(outcome.wait_status) && WEXITSTATUS(outcome.wait_status) == 0)
      << outcome.output;
  EXPECT_NE(outcome.output.find(
                "warning: a plugin started a thread while loading; each worker loads the plugins "
                "itself"),
            std::string::npos)
      << outcome.output;
  EXPECT_NE(outcome.output.find("training done: 2 steps"), std::string::npos) << outcome.output;
}

TEST_F(LauncherTest, BadFlagValueNamesFlagAndRange) {
  const Outcome outcome = RunLauncher("--num-processes 0");
  ExpectCleanFailure(outcome);
  EXPECT_NE(outcome.output.find("--num-processes must be between 1 and 1024 (got 0)"),
            std::string::npos)
      << outcome.output;
}

TEST_F(LauncherTest, UnknownFlagPointsToHelp) {
  const Outcome outcome = RunLauncher("--no-such-flag");
  ExpectCleanFailure(outcome);
  EXPECT_NE(outcome.output.find("unknown flag --no-such-flag; see launcher --help"),
            std::string::npos)
      << outcome.output;
}

TEST_F(LauncherTest, HelpAndVersionSucceed) {
  const Outcome help = RunLauncher("--help");
  ASSERT_TRUE(WIFEXITED(help.wait_status));
  EXPECT_EQ(WEXITSTATUS(help.wait_status), 0) << help.output;
  EXPECT_NE(help.output.find("--num-processes"), std::string::npos) << help.output;
  const Outcome version = RunLauncher("--version");
  ASSERT_TRUE(WIFEXITED(version.wait_status));
  EXPECT_EQ(WEXITSTATUS(version.wait_status), 0) << version.output;
  EXPECT_NE(version.output.find("backend ABI v1..v5, model ABI v1..v4, dataset ABI v1..v2"),
            std::string::npos)
      << version.output;
}

}  // namespace
