// A program that cannot start (`launcher -- PROGRAM` where PROGRAM is missing, not executable or
// has no interpreter): refused before any rank runs, naming the program and what to do, and never
// restarted.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cluster_test_support.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

class UnstartableProgramTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-unstartable-XXXXXX";
    folder_ = mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(folder_); }

  std::string folder_;
};

TEST_P(UnstartableProgramTest, IsNamedAndNotRestarted) {
  const std::string not_executable = folder_ + "/not-executable.sh";
  const std::string no_interpreter = folder_ + "/no-interpreter";
  std::ofstream(not_executable) << "#!/bin/sh\necho hello\n";
  std::ofstream(no_interpreter) << "echo no #! line\n";
  chmod(no_interpreter.c_str(), 0755);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dpl-no-such-program", "the program 'dpl-no-such-program' (after --) is not on PATH ("},
      {folder_ + "/missing.py", "cannot start the program '" + folder_ +
                                    "/missing.py' (after --): No such file or directory"},
      {not_executable, "cannot start the program '" + not_executable +
                           "' (after --): it is not executable (chmod +x it, or give its "
                           "interpreter first: -- python3 " +
                           not_executable + ")"},
      {no_interpreter, "cannot start the program '" + no_interpreter +
                           "' (after --): Exec format error (a script needs a #! line, or give "
                           "its interpreter first)"},
  };
  const auto& [program, message] = cases.at(static_cast<size_t>(GetParam()));
  LauncherProcess launcher({"--num-processes", "2", "--master-port", "0", "--max-restarts", "3",
                            "--", program, "--out", "x"},
                           OutputPath("launcher"));
  const auto status = launcher.Wait(30s);
  const std::string output = launcher.Output();
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "[launcher 0] error: job failed: " + message)) << output;
  EXPECT_FALSE(Contains(output, "restarting")) << output;
}

INSTANTIATE_TEST_SUITE_P(Programs, UnstartableProgramTest, ::testing::Range(0, 4));

}  // namespace
}  // namespace dpl::test
