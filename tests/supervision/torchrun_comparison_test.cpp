// `launcher -- python3 SCRIPT` against torchrun (`python3 -m torch.distributed.run`, the torchrun
// command of dpl's pinned torch) on one DDP script of the recipe's shape (programs/ddp_program.py),
// two ranks on this machine: the variables each rank sees and the parameters it ends with, what
// the job says when a rank raises, and what is left running after the end and after Ctrl-C.
// Skipped where dpl's Python cannot import torch.distributed.run.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "cluster_test_support.hpp"
#include "support/shell_capture.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Variables = std::map<std::string, std::string>;

constexpr const char* kPython = DPL_TEST_PYTHON;
const std::string kScript =
    std::string(DPL_TEST_SOURCE_DIR) + "/tests/supervision/programs/ddp_program.py";

// What torchrun gives a rank, by how dpl's launcher compares.
// The same value under both: where the rank stands, and the settings of the job's shape.
const std::set<std::string> kSameValue = {"RANK",
                                          "LOCAL_RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK",
                                          "GROUP_WORLD_SIZE",
                                          "ROLE_RANK",
                                          "ROLE_WORLD_SIZE",
                                          "ROLE_NAME",
                                          "OMP_NUM_THREADS",
                                          "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS",
                                          "TORCH_NCCL_ASYNC_ERROR_HANDLING"};
// Set by both to a value of their own: torchrun's agent serves the TCPStore at localhost
// (TORCHELASTIC_USE_AGENT_STORE=True), dpl's rank 0 at 127.0.0.1, and the job ids differ.
const std::set<std::string> kOwnValue = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                                         "TORCHELASTIC_USE_AGENT_STORE"};
// torchrun's alone: the file a script's @record writes its error into for the agent (dpl reads
// the traceback from the rank's output instead), and the signals the agent itself handles.
const std::set<std::string> kTorchrunAlone = {"TORCHELASTIC_ERROR_FILE",
                                              "TORCHELASTIC_SIGNALS_TO_HANDLE"};

// The lines of a file.
std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream text(ReadFile(path));
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  return lines;
}

// What a rank's environment (rank-R.environ) holds beyond this test's own environment.
Variables AddedVariables(const std::string& path) {
  Variables added;
  for (const std::string& line : Lines(path)) {
    const size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string name = line.substr(0, equals), value = line.substr(equals + 1);
    const char* ours = std::getenv(name.c_str());
    if (name != "_" && (ours == nullptr || value != ours)) added[name] = value;
  }
  return added;
}

// Every pid the ranks of ddp_program.py wrote: theirs, and their children's with --child.
std::vector<pid_t> ProgramPids(const std::string& folder) {
  std::vector<pid_t> pids;
  for (const char* rank : {"0", "1"}) {
    for (const std::string& line : Lines(folder + "/rank-" + rank + ".pid")) {
      pids.push_back(static_cast<pid_t>(std::stoi(line)));
    }
  }
  return pids;
}

std::vector<pid_t> Alive(const std::vector<pid_t>& pids) {
  std::vector<pid_t> alive;
  for (pid_t pid : pids) {
    if (IsAlive(pid)) alive.push_back(pid);
  }
  return alive;
}

class TorchrunComparisonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int exit_code = -1;
    const std::string why = dpl::testing::Capture(
        std::string(kPython) + " -c 'import torch.distributed.run' 2>&1", &exit_code);
    if (exit_code != 0) {
      GTEST_SKIP() << kPython << " has no torchrun (run tools/setup.sh): " << why;
    }
    // Orphans of the runs become our children, so that the test sees and ends all of them.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    char pattern[] = "/tmp/dpl-torchrun-XXXXXX";
    folder_ = mkdtemp(pattern);
  }
  void TearDown() override {
    for (pid_t pid : left_) kill(pid, SIGKILL);
    if (!folder_.empty()) std::filesystem::remove_all(folder_);
  }

  // A folder of this test's own for one run, made.
  std::string Out(const std::string& name) {
    std::filesystem::create_directories(folder_ + "/" + name);
    return folder_ + "/" + name;
  }

  // torchrun with two ranks on this machine, on a free port (torchrun's default, 29500, would be
  // shared with whatever else runs here).
  static Args Torchrun(const std::string& out, const Args& script) {
    return Concat({kPython, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                   std::to_string(FreePort()), kScript, "--out", out},
                  script);
  }
  // The launcher with two ranks of one compute thread each, as torchrun's OMP_NUM_THREADS=1.
  static Args Launcher(const std::string& out, const Args& script) {
    return Concat({"--num-processes", "2", "--master-port", "0", "--threads-per-worker", "1",
                   "--log-time", "none", "--", kPython, kScript, "--out", out},
                  script);
  }

  // The pids of `out`'s ranks still alive; they are ended when the test ends.
  std::vector<pid_t> LeftRunning(const std::string& out) {
    const std::vector<pid_t> alive = Alive(ProgramPids(out));
    left_.insert(left_.end(), alive.begin(), alive.end());
    return alive;
  }

  std::string folder_;
  std::vector<pid_t> left_;
};

TEST_F(TorchrunComparisonTest, EachRankSeesTorchrunsVariablesAndEndsWithItsParameters) {
  const std::string torchrun = Out("torchrun"), dpl = Out("dpl");
  const Args script = {"--steps", "8", "--child"};
  ChildProcess reference(Torchrun(torchrun, script), OutputPath("torchrun"));
  for (int i = 0; i < 24000 && !reference.Exited(); ++i) usleep(10000);
  ASSERT_TRUE(reference.Succeeded()) << reference.Output();
  LauncherProcess launcher(Launcher(dpl, script), OutputPath("launcher"));
  const auto status = launcher.Wait(240s);
  ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher.Output();

  const std::vector<float> parameters = ReadFloats(torchrun + "/rank-0.bin");
  ASSERT_FALSE(parameters.empty());
  EXPECT_TRUE(parameters == ReadFloats(torchrun + "/rank-1.bin"));
  EXPECT_TRUE(parameters == ReadFloats(dpl + "/rank-0.bin"));
  EXPECT_TRUE(parameters == ReadFloats(dpl + "/rank-1.bin"));

  for (const char* rank_name : {"0", "1"}) {
    const std::string rank = rank_name;
    const Variables theirs = AddedVariables(torchrun + "/rank-" + rank + ".environ");
    const Variables ours = AddedVariables(dpl + "/rank-" + rank + ".environ");
    EXPECT_EQ(theirs.at("RANK"), rank);
    for (const auto& [name, value] : theirs) {
      if (kSameValue.count(name)) {
        EXPECT_EQ(ours.count(name) ? ours.at(name) : "(unset)", value) << name << ", rank " << rank;
      } else if (kOwnValue.count(name)) {
        EXPECT_EQ(ours.count(name), 1u) << name << ", rank " << rank;
      } else {
        EXPECT_EQ(kTorchrunAlone.count(name), 1u)
            << "torchrun gives rank " << rank << " " << name << "=" << value
            << ", which this test does not know: does dpl need it?";
      }
    }
    // The name torch 1.13 reads too.
    EXPECT_EQ(ours.at("NCCL_ASYNC_ERROR_HANDLING"), "1");
  }
  // After a normal end, torchrun leaves what a rank started (a DataLoader's workers, here a
  // `sleep`) running; dpl stops each rank's process group.
  EXPECT_TRUE(WaitUntilGone(ProgramPids(dpl), 2s)) << "dpl left a process";
  EXPECT_EQ(LeftRunning(torchrun).size(), 2u) << "torchrun left its ranks' children running";
}

// Rank 1 raises; rank 0 fails 0.3 s later and exits first, as a peer whose connection to it
// closed; rank 1 exits a second after its traceback (a slow teardown).
TEST_F(TorchrunComparisonTest, TheRankThatRaisedIsNamedWithItsTraceback) {
  const std::string torchrun = Out("torchrun"), dpl = Out("dpl");
  const Args script = {"--steps",     "100000", "--fail-rank", "1",
                       "--fail-step", "5",      "--linger",    "1"};
  ChildProcess reference(Torchrun(torchrun, script), OutputPath("torchrun"));
  for (int i = 0; i < 24000 && !reference.Exited(); ++i) usleep(10000);
  ASSERT_TRUE(reference.Exited()) << reference.Output();
  LauncherProcess launcher(Launcher(dpl, script), OutputPath("launcher"));
  const auto status = launcher.Wait(240s);
  const std::string output = launcher.Output();
  ASSERT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;

  // The job's error: rank 1 as the root cause, then its traceback whole, to the exception.
  const std::regex named_with_traceback(
      R"(error: job failed: rank 1 \(machine 0, local rank 1, pid \d+\) failed first: exit )"
      R"(code 1; the end of its output \(the root cause\):\n    \[rank 1\] Traceback )"
      R"(\(most recent call last\):\n(    \[rank 1\] .*\n)*    \[rank 1\] RuntimeError: rank 1 )"
      R"(fails at step 5\n)");
  EXPECT_TRUE(std::regex_search(output, named_with_traceback)) << output;

  // torchrun names the rank that exited first, and points to a page instead of a traceback.
  const std::string theirs = reference.Output();
  const size_t summary = theirs.find("Root Cause (first observed failure):");
  ASSERT_NE(summary, std::string::npos) << theirs;
  const std::string root_cause = theirs.substr(summary);
  EXPECT_TRUE(Contains(root_cause, "rank      : 0 (local_rank: 0)")) << root_cause;
  EXPECT_TRUE(Contains(root_cause, "error_file: <N/A>")) << root_cause;
  EXPECT_FALSE(Contains(root_cause, "rank 1 fails at step 5")) << root_cause;
}

// Ctrl-C in a shell signals the job's whole process group. Returns how long `job` took to exit.
std::chrono::milliseconds InterruptAfterStep3(ChildProcess& job, const std::string& out) {
  EXPECT_TRUE(job.WaitForOutput("step 3 loss", 120s)) << job.Output();
  EXPECT_TRUE(WaitForFile(out + "/rank-1.pid", 10s));
  usleep(200000);  // the ranks' children are started and their pids written
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_EQ(kill(-job.pid(), SIGINT), 0);
  for (int i = 0; i < 6000 && !job.Exited(); ++i) usleep(10000);
  EXPECT_TRUE(job.Exited()) << job.Output();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               sent);
}

TEST_F(TorchrunComparisonTest, CtrlCLeavesNothingRunning) {
  const std::string torchrun = Out("torchrun"), dpl = Out("dpl");
  const Args script = {"--steps", "100000", "--child"};
  ChildProcess reference(Torchrun(torchrun, script), OutputPath("torchrun"), ProcessGroup::kOwn);
  const auto torchrun_took = InterruptAfterStep3(reference, torchrun);
  const size_t torchrun_left = LeftRunning(torchrun).size();
  ChildProcess launcher(Concat({DPL_TEST_LAUNCHER}, Launcher(dpl, script)), OutputPath("launcher"),
                        ProcessGroup::kOwn);
  const auto dpl_took = InterruptAfterStep3(launcher, dpl);
  EXPECT_FALSE(launcher.Succeeded()) << launcher.Output();
  EXPECT_TRUE(Contains(launcher.Output(), "stopped by signal 2 (SIGINT)")) << launcher.Output();
  EXPECT_TRUE(WaitUntilGone(ProgramPids(dpl), 1s)) << "dpl left a process after Ctrl-C";
  EXPECT_LT(dpl_took, 10s);
  std::cout << "after Ctrl-C: torchrun exited in " << torchrun_took.count() << " ms and left "
            << torchrun_left << " processes; dpl exited in " << dpl_took.count() << " ms\n";
}

}  // namespace
}  // namespace dpl::test
