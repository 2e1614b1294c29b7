// A program as the workers (`launcher [flags] -- PROGRAM [ARGS...]`). With dpl's Python (torch,
// numpy, ...): a DDP script of the recipe's shape (programs/ddp_program.py) trains to the same
// parameters under one launcher of two processes, under two launchers of one and started by hand
// with torchrun's variables; a rank that raises is named with its whole traceback and no process is
// left; a restart sees TORCHELASTIC_RESTART_COUNT=1. With /bin/sh: torchrun's variables on two
// machines,
// --env, the console by --log-ranks, Ctrl-C forwarded, the program compared at the join
// (programs that cannot start: unstartable_program_test.cpp).
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "cluster_test_support.hpp"
#include "support/shell_capture.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPython = DPL_TEST_PYTHON;
const std::string kScript =
    std::string(DPL_TEST_SOURCE_DIR) + "/tests/supervision/programs/ddp_program.py";

// A folder of the test's own, removed at the end.
class Scratch {
 public:
  Scratch() {
    char pattern[] = "/tmp/dpl-program-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~Scratch() { std::filesystem::remove_all(path_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // A folder below this one, made.
  std::string Folder(const std::string& name) const {
    std::filesystem::create_directories(path_ + "/" + name);
    return path_ + "/" + name;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The lines of a file.
std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream text(ReadFile(path));
  for (std::string line; std::getline(text, line);) lines.push_back(line);
  return lines;
}

// NAME=value pairs of a line of `env` output or of rank-R.env's "NAME=value NAME=value".
std::map<std::string, std::string> Variables(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> variables;
  for (const std::string& entry : entries) {
    const size_t equals = entry.find('=');
    if (equals != std::string::npos) variables[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  return variables;
}

std::map<std::string, std::string> WordVariables(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream text(line);
  for (std::string word; text >> word;) words.push_back(word);
  return Variables(words);
}

// Every pid a rank of ddp_program.py wrote (itself, and its child with --child).
std::vector<pid_t> ProgramPids(const std::string& folder, int world_size) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world_size; ++rank) {
    for (const std::string& line : Lines(folder + "/rank-" + std::to_string(rank) + ".pid")) {
      pids.push_back(static_cast<pid_t>(std::stoi(line)));
    }
  }
  return pids;
}

class ProgramJobTest : public ::testing::Test {
 protected:
  // Orphans of killed launchers become our children, so the test can see all of them.
  void SetUp() override { prctl(PR_SET_CHILD_SUBREAPER, 1); }

  Scratch scratch_;
};

class TorchProgramTest : public ProgramJobTest {
 protected:
  void SetUp() override {
    ProgramJobTest::SetUp();
    if (!dpl::testing::PythonHasTorch()) {
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
    }
  }
};

// `launcher ARGS -- python3 ddp_program.py --out OUT SCRIPT_ARGS`, one compute thread per rank:
// the parameters depend on how many threads sum each product.
Args ScriptJob(const Args& launcher, const std::string& out, const Args& script = {}) {
  return Concat(Concat(launcher, {"--log-time", "none", "--threads-per-worker", "1", "--", kPython,
                                  kScript, "--out", out}),
                script);
}

TEST_F(TorchProgramTest, TheRecipesScriptTrainsAlikeUnderLaunchersAndByHand) {
  const std::string by_hand = scratch_.Folder("by-hand"), one = scratch_.Folder("one-launcher"),
                    two = scratch_.Folder("two-launchers");
  // By hand: one process per rank with torchrun's variables, as torchrun would start them.
  const std::string port = std::to_string(FreePort());
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    ranks.push_back(std::make_unique<ChildProcess>(
        Args{"env", "RANK=" + r, "LOCAL_RANK=" + r, "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
             "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "OMP_NUM_THREADS=1", kPython, kScript,
             "--out", by_hand},
        OutputPath("by-hand-" + r)));
  }
  LauncherProcess launcher(ScriptJob({"--num-processes", "2", "--master-port", "0"}, one),
                           OutputPath("one"));
  LauncherProcess machine0(ScriptJob({"--num-machines", "2", "--machine-id", "0", "--master-port",
                                      "0", "--rendezvous-timeout", "120"},
                                     two),
                           OutputPath("machine0"));
  const int store_port = machine0.WaitForStorePort();
  ASSERT_GT(store_port, 0) << machine0.Output();
  LauncherProcess machine1(ScriptJob({"--num-machines", "2", "--machine-id", "1", "--master-port",
                                      std::to_string(store_port), "--rendezvous-timeout", "120"},
                                     two),
                           OutputPath("machine1"));
  for (LauncherProcess* process : {&launcher, &machine0, &machine1}) {
    const auto status = process->Wait(240s);
    ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << process->Output();
  }
  for (auto& rank : ranks) {
    for (int i = 0; i < 24000 && !rank->Exited(); ++i) usleep(10000);
    ASSERT_TRUE(rank->Succeeded()) << rank->Output();
  }
  EXPECT_TRUE(Contains(launcher.Output(), "[rank 0] step 8 loss ")) << launcher.Output();
  const std::vector<float> reference = ReadFloats(by_hand + "/rank-0.bin");
  ASSERT_EQ(reference.size(), 4u * 9 + 4 + 10u * 4 * 13 * 13 + 10);
  EXPECT_TRUE(reference == ReadFloats(by_hand + "/rank-1.bin"));
  for (const std::string& folder : {one, two}) {
    EXPECT_TRUE(reference == ReadFloats(folder + "/rank-0.bin")) << folder;
    EXPECT_TRUE(reference == ReadFloats(folder + "/rank-1.bin")) << folder;
  }
  // Two machines of one rank each: the second reached rank 0's store through machine 0's port.
  const auto rank0 = WordVariables(Lines(two + "/rank-0.env").at(0));
  const auto rank1 = WordVariables(Lines(two + "/rank-1.env").at(0));
  EXPECT_EQ(rank1.at("GROUP_RANK"), "1");
  EXPECT_EQ(rank1.at("LOCAL_RANK"), "0");
  EXPECT_EQ(rank1.at("MASTER_PORT"), rank0.at("MASTER_PORT"));
  EXPECT_NE(rank0.at("MASTER_PORT"), std::to_string(store_port));
}

// The job's error names rank 1, ddp_program.py's --fail-rank, as the root cause, with its exit
// code and traceback.
void ExpectRankOneNamedWithItsTraceback(const std::string& output) {
  EXPECT_TRUE(Contains(output, "[launcher 0] error: job failed: rank 1 (machine 0, local rank 1, "))
      << output;
  // torch 2 prefixes every line of a rank's uncaught exception with "[rankN]: " itself (the
  // excepthook of init_process_group); torch 1.13 writes the traceback bare.
  const std::string torch = Contains(output, "[rank 1] [rank1]: ") ? "[rank1]: " : "";
  EXPECT_TRUE(Contains(output,
                       ") failed first: exit code 1; the end of its output (the root "
                       "cause):\n    [rank 1] " +
                           torch + "Traceback (most recent call last):\n"))
      << output;
  EXPECT_TRUE(Contains(output, "\n    [rank 1] " + torch + "RuntimeError: rank 1 fails at step 5"))
      << output;
}

TEST_F(TorchProgramTest, ARankThatRaisesIsNamedWithItsWholeTracebackAndNothingIsLeft) {
  const std::string out = scratch_.Folder("out");
  LauncherProcess launcher(
      ScriptJob({"--num-processes", "2", "--master-port", "0"}, out,
                {"--steps", "100000", "--fail-rank", "1", "--fail-step", "5", "--child"}),
      OutputPath("launcher"));
  const auto status = launcher.Wait(240s);
  const auto ended = std::chrono::system_clock::now();
  const std::string output = launcher.Output();
  ASSERT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  struct stat raised {};
  ASSERT_EQ(stat((out + "/raised").c_str(), &raised), 0) << output;
  const auto raised_at =
      std::chrono::system_clock::time_point(std::chrono::seconds(raised.st_mtim.tv_sec) +
                                            std::chrono::nanoseconds(raised.st_mtim.tv_nsec));
  EXPECT_LT(ended - raised_at, 5s) << output;
  ExpectRankOneNamedWithItsTraceback(output);
  // The whole traceback, longer than the last lines shown of other output: every frame of the
  // recursion that raised.
  size_t frames = 0;
  for (size_t at = 0; (at = output.find(", in fail_again\n", at)) != std::string::npos; ++at) {
    ++frames;
  }
  EXPECT_EQ(frames, 2 * 12u) << output;  // on the console, and in the job's error
  const std::vector<pid_t> pids = ProgramPids(out, 2);
  EXPECT_EQ(pids.size(), 4u);  // two ranks and their children
  EXPECT_TRUE(WaitUntilGone(pids, 2s)) << "a rank or its child outlived the job";
}

// Note [A raising rank is the root cause]: the rank that raised is named even when its peer,
// failing because of it, exits first (here the raising rank exits a second after its traceback,
// its peer 0.3 s after the raise).
TEST_F(TorchProgramTest, ARankThatRaisesIsNamedEvenWhenItsPeerExitsFirst) {
  const std::string out = scratch_.Folder("out");
  LauncherProcess launcher(
      ScriptJob({"--num-processes", "2", "--master-port", "0"}, out,
                {"--steps", "100000", "--fail-rank", "1", "--fail-step", "5", "--linger", "1"}),
      OutputPath("launcher"));
  const auto status = launcher.Wait(240s);
  const std::string output = launcher.Output();
  ASSERT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  // Rank 0 failed on its own and exited before rank 1 did.
  EXPECT_TRUE(Contains(output, "[rank 0] RuntimeError: ")) << output;
  ExpectRankOneNamedWithItsTraceback(output);
}

TEST_F(TorchProgramTest, ARestartSeesRestartCountOneAndAFreshPort) {
  const std::string out = scratch_.Folder("out");
  LauncherProcess launcher(
      ScriptJob({"--num-processes", "2", "--master-port", "0", "--max-restarts", "1"}, out,
                {"--steps", "4", "--fail-rank", "1", "--fail-step", "2", "--fail-attempt", "0"}),
      OutputPath("launcher"));
  const auto status = launcher.Wait(240s);
  const std::string output = launcher.Output();
  ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "restarting the job (restart 1 of 1)")) << output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<std::string> attempts = Lines(out + "/rank-" + std::to_string(rank) + ".env");
    ASSERT_EQ(attempts.size(), 2u) << ReadFile(out + "/rank-" + std::to_string(rank) + ".env");
    const auto first = WordVariables(attempts[0]), second = WordVariables(attempts[1]);
    EXPECT_EQ(first.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(second.at("TORCHELASTIC_RESTART_COUNT"), "1");
    EXPECT_NE(first.at("MASTER_PORT"), second.at("MASTER_PORT"));
    EXPECT_EQ(first.at("TORCHELASTIC_RUN_ID"), second.at("TORCHELASTIC_RUN_ID"));
  }
  EXPECT_EQ(ReadFloats(out + "/rank-0.bin"), ReadFloats(out + "/rank-1.bin"));
}

// A shell as the program: each rank writes its environment to DIR/env-RANK.
Args EnvDump(const std::string& folder) {
  return {"--", "/bin/sh", "-c", "env > \"$0/env-$RANK\"", folder};
}

TEST_F(ProgramJobTest, EveryRankGetsTorchrunsVariablesOnEveryMachine) {
  const std::string out = scratch_.Folder("out");
  const Args shape = {"--num-machines",       "2", "--num-processes", "2",
                      "--threads-per-worker", "3", "--env",           "DPL_TEST_GIVEN=a 'b' $c",
                      "--rendezvous-timeout", "30"};
  LauncherProcess machine0(
      Concat(Concat(shape, {"--machine-id", "0", "--master-port", "0"}), EnvDump(out)),
      OutputPath("machine0"), {"env", "DPL_JOB_TOKEN=program-secret-1"});
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(
      Concat(Concat(shape, {"--machine-id", "1", "--master-port", std::to_string(port)}),
             EnvDump(out)),
      OutputPath("machine1"), {"env", "DPL_JOB_TOKEN=program-secret-1"});
  for (LauncherProcess* process : {&machine0, &machine1}) {
    const auto status = process->Wait(60s);
    ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << process->Output();
  }
  const auto rank0 = Variables(Lines(out + "/env-0"));
  for (int rank = 0; rank < 4; ++rank) {
    const auto variables = Variables(Lines(out + "/env-" + std::to_string(rank)));
    const std::map<std::string, std::string> expected = {
        {"RANK", std::to_string(rank)},
        {"LOCAL_RANK", std::to_string(rank % 2)},
        {"GROUP_RANK", std::to_string(rank / 2)},
        {"ROLE_RANK", std::to_string(rank)},
        {"WORLD_SIZE", "4"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_WORLD_SIZE", "4"},
        {"ROLE_NAME", "default"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", rank0.at("MASTER_PORT")},
        {"TORCHELASTIC_RESTART_COUNT", "0"},
        {"TORCHELASTIC_MAX_RESTARTS", "0"},
        {"TORCHELASTIC_RUN_ID", rank0.at("TORCHELASTIC_RUN_ID")},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
        {"OMP_NUM_THREADS", "3"},
        {"NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"DPL_TEST_GIVEN", "a 'b' $c"},
    };
    for (const auto& [name, value] : expected) {
      ASSERT_EQ(variables.count(name), 1u) << name << " of rank " << rank;
      EXPECT_EQ(variables.at(name), value) << name << " of rank " << rank;
    }
    EXPECT_EQ(variables.count("DPL_JOB_TOKEN"), 0u) << "the job token reached rank " << rank;
    EXPECT_EQ(variables.count("DPL_ATTEMPT"), 0u) << rank;
  }
  EXPECT_NE(rank0.at("MASTER_PORT"), std::to_string(port));  // not dpl's store
  EXPECT_EQ(rank0.at("TORCHELASTIC_RUN_ID").rfind("dpl-", 0), 0u);
  EXPECT_TRUE(Contains(machine0.Output(),
                       "[launcher 0] started /bin/sh -c 'env > \"$0/env-$RANK\"' " + out +
                           " as ranks 0..1 of 4; rank 0 serves torch's "
                           "store at 127.0.0.1:" +
                           rank0.at("MASTER_PORT")))
      << machine0.Output();
}

// Each rank says hello on its output.
const Args kHello = {"--", "/bin/sh", "-c", "echo \"hello from $RANK\""};

TEST_F(ProgramJobTest, EveryRankReachesTheConsoleUnlessLogRanksSaysOtherwise) {
  LauncherProcess all(Concat({"--num-processes", "2", "--master-port", "0"}, kHello),
                      OutputPath("all"));
  const std::string logs = scratch_.Folder("logs");
  LauncherProcess first(
      Concat({"--num-processes", "2", "--master-port", "0", "--log-ranks", "0", "--log-dir", logs},
             kHello),
      OutputPath("first"));
  for (LauncherProcess* process : {&all, &first}) {
    const auto status = process->Wait(30s);
    ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << process->Output();
  }
  EXPECT_TRUE(Contains(all.Output(), "[rank 0] hello from 0\n")) << all.Output();
  EXPECT_TRUE(Contains(all.Output(), "[rank 1] hello from 1\n")) << all.Output();
  EXPECT_TRUE(Contains(first.Output(), "[rank 0] hello from 0\n")) << first.Output();
  EXPECT_FALSE(Contains(first.Output(), "hello from 1")) << first.Output();
  EXPECT_TRUE(Contains(ReadFile(logs + "/rank-1.log"), "[rank 1] hello from 1\n"));
}

// A program's standard output is the launcher's, its standard error and the log the launcher's
// standard error, as under torchrun: `launcher -- PROGRAM > results.txt` keeps the results.
TEST_F(ProgramJobTest, AProgramsStandardOutputStaysTheLaunchersStandardOutput) {
  const std::string errors = scratch_.path() + "/errors";
  LauncherProcess launcher({"--num-processes", "2", "--master-port", "0", "--", "/bin/sh", "-c",
                            "echo \"result of $RANK\"; echo \"warning of $RANK\" >&2"},
                           OutputPath("output"), {"/bin/sh", "-c", "exec \"$@\" 2>\"$0\"", errors});
  const auto status = launcher.Wait(30s);
  ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher.Output();
  const std::string output = launcher.Output(), error = ReadFile(errors);
  EXPECT_TRUE(Contains(output, "[rank 0] result of 0\n")) << output << error;
  EXPECT_TRUE(Contains(output, "[rank 1] result of 1\n")) << output << error;
  EXPECT_EQ(Lines(OutputPath("output")).size(), 2u) << output;  // nothing else
  EXPECT_TRUE(Contains(error, "[rank 1] warning of 1\n")) << error;
  EXPECT_TRUE(Contains(error, "[launcher 0] all 2 workers of machine 0 finished")) << error;
}

TEST_F(ProgramJobTest, CtrlCReachesEveryRankAndNothingIsLeft) {
  const std::string out = scratch_.Folder("out");
  LauncherProcess launcher(
      {"--num-processes", "2", "--master-port", "0", "--", "/bin/sh", "-c",
       "echo $$ > \"$0/pid-$RANK\"; trap 'echo interrupted > \"$0/int-$RANK\"; exit 5' INT; "
       "while :; do sleep 0.05; done",
       out},
      OutputPath("launcher"));
  for (int i = 0; i < 3000 && !(std::filesystem::exists(out + "/pid-0") &&
                                std::filesystem::exists(out + "/pid-1"));
       ++i) {
    usleep(10000);
  }
  ASSERT_TRUE(std::filesystem::exists(out + "/pid-1")) << launcher.Output();
  usleep(100000);  // both shells have set their trap
  ASSERT_EQ(kill(launcher.pid(), SIGINT), 0);
  const auto status = launcher.Wait(10s);
  const std::string output = launcher.Output();
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "the launcher of machine 0 was stopped by signal 2 (SIGINT)"))
      << output;
  EXPECT_EQ(ReadFile(out + "/int-0"), "interrupted\n");
  EXPECT_EQ(ReadFile(out + "/int-1"), "interrupted\n");
  const std::vector<pid_t> shells = {std::stoi(ReadFile(out + "/pid-0")),
                                     std::stoi(ReadFile(out + "/pid-1"))};
  EXPECT_TRUE(WaitUntilGone(shells, 1s));
}

TEST_F(ProgramJobTest, AnotherProgramOnAnotherMachineIsRefusedAtTheJoin) {
  const Args shape = {"--num-machines", "2", "--rendezvous-timeout", "20"};
  LauncherProcess machine0(
      Concat(shape, {"--machine-id", "0", "--master-port", "0", "--", "sleep", "5"}),
      OutputPath("machine0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Concat(shape, {"--machine-id", "1", "--master-port",
                                          std::to_string(port), "--", "sleep", "5 6"}),
                           OutputPath("machine1"));
  const auto status1 = machine1.Wait(20s);
  const auto status0 = machine0.Wait(20s);
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << machine0.Output();
  const std::string message =
      "--program differs between machines: this machine (--machine-id 1) has sleep '5 6', machine "
      "0 has sleep 5; pass the same value to every launcher";
  EXPECT_TRUE(Contains(machine1.Output(), message)) << machine1.Output();
}

// Rank 1 on machine 1 fails; rank 0 on machine 0 fails after it, as a rank whose collective lost
// its peer does, with an exit code like any other: both machines name rank 1.
TEST_F(ProgramJobTest, EveryMachineNamesTheRankThatFailedFirstOnAnotherMachine) {
  const std::string out = scratch_.Folder("out");
  const Args program = {
      "--", "/bin/sh", "-c",
      "if [ \"$RANK\" = 1 ]; then echo 'rank 1 fails'; touch \"$0/failed\"; exit 1; fi; "
      "while [ ! -e \"$0/failed\" ]; do sleep 0.01; done; sleep 1; echo 'lost a peer'; exit 1",
      out};
  const Args shape = {"--num-machines", "2", "--rendezvous-timeout", "20"};
  LauncherProcess machine0(
      Concat(Concat(shape, {"--machine-id", "0", "--master-port", "0"}), program),
      OutputPath("machine0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(
      Concat(Concat(shape, {"--machine-id", "1", "--master-port", std::to_string(port)}), program),
      OutputPath("machine1"));
  const auto status0 = machine0.Wait(20s), status1 = machine1.Wait(20s);
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1) << machine1.Output();
  const std::string root_cause =
      ") failed first: exit code 1; the end of its output (the root cause):\n    [rank 1] rank 1 "
      "fails";
  EXPECT_TRUE(Contains(machine1.Output(),
                       "[launcher 1] error: job failed: rank 1 (machine 1, local rank 0, pid "))
      << machine1.Output();
  EXPECT_TRUE(Contains(machine1.Output(), root_cause)) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(),
                       "[launcher 0] error: job failed: the job failed elsewhere: rank 1 (machine "
                       "1, local rank 0, pid "))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), root_cause)) << machine0.Output();
}

// Machine 0 started with torchrun's flags, machine 1 with the variables a Kubernetes PyTorchJob
// sets: the same program on both, its ranks with their own RANK and WORLD_SIZE.
TEST_F(ProgramJobTest, TorchrunsFlagsAndKubernetesVariablesStartAProgramsMachines) {
  const std::string port = std::to_string(FreePort());
  const Args program = {"--", "/bin/sh", "-c", "echo \"$RANK of $WORLD_SIZE via $MASTER_ADDR\""};
  LauncherProcess machine0(Concat({"--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "2",
                                   "--rdzv-endpoint", "127.0.0.1:" + port},
                                  program),
                           OutputPath("machine0"));
  LauncherProcess machine1(Concat({"--nproc-per-node", "2"}, program), OutputPath("machine1"),
                           {"env", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "WORLD_SIZE=2",
                            "RANK=1", "LOCAL_RANK=0"});
  for (LauncherProcess* process : {&machine0, &machine1}) {
    const auto status = process->Wait(30s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << process->Output();
  }
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 1] 1 of 4 via 127.0.0.1\n")) << machine0.Output();
  EXPECT_TRUE(Contains(machine1.Output(), "[rank 2] 2 of 4 via 127.0.0.1\n")) << machine1.Output();
  EXPECT_TRUE(Contains(machine1.Output(), "[rank 3] 3 of 4 via 127.0.0.1\n")) << machine1.Output();
}

// An elastic job of a program: a machine is lost, its peers' ranks fail (as a DDP script's would,
// its collectives cut), and the job restarts on the machines left, TORCHELASTIC_RESTART_COUNT 1.
// The grace is 3 s so that a loaded machine's third launcher still joins the first attempt.
TEST_F(ProgramJobTest, AnElasticJobRestartsTheProgramOnTheMachinesLeft) {
  const std::string out = scratch_.Folder("out");
  const Args args = {
      "--num-machines",
      "2:3",
      "--master-port",
      std::to_string(FreePort()),
      "--max-restarts",
      "1",
      "--join-grace",
      "3",
      "--rendezvous-timeout",
      "30",
      "--",
      "/bin/sh",
      "-c",
      "echo \"$GROUP_RANK $WORLD_SIZE\" > \"$0/seen-$TORCHELASTIC_RESTART_COUNT-$RANK\"; "
      "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] && exit 0; "
      "while [ ! -e \"$0/cut\" ]; do sleep 0.05; done; exit 1",
      out};
  LauncherProcess a(args, OutputPath("a")), b(args, OutputPath("b")), c(args, OutputPath("c"));
  LauncherProcess* machine2 = MachineNumbered({&a, &b, &c}, 2);
  ASSERT_NE(machine2, nullptr) << a.Output() << b.Output() << c.Output();
  for (const char* rank : {"0", "1", "2"}) {
    ASSERT_TRUE(WaitForFile(out + "/seen-0-" + rank, 30s)) << a.Output() << b.Output();
  }
  ASSERT_EQ(kill(machine2->pid(), SIGKILL), 0);
  machine2->Wait(5s);
  std::ofstream(out + "/cut") << "the collectives are cut\n";
  for (LauncherProcess* launcher : {&a, &b, &c}) {
    if (launcher == machine2) continue;
    const auto status = launcher->Wait(60s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  EXPECT_EQ(ReadFile(out + "/seen-0-2"), "2 3\n");
  EXPECT_EQ(ReadFile(out + "/seen-1-0"), "0 2\n");
  EXPECT_EQ(ReadFile(out + "/seen-1-1"), "1 2\n");
  EXPECT_FALSE(std::filesystem::exists(out + "/seen-1-2"));
}

}  // namespace
}  // namespace dpl::test
