// Several launchers of one job on this host, as its machines: ids from the join order, the
// settings every machine must share, torchrun's environment in and out, an elastic job that
// loses a machine, and --hostfile with hosts of this machine.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "cluster_test_support.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

// A --selftest launcher: no model plugin, a second or so.
Args Selftest(int machines, std::optional<int> machine_id, int processes, int port,
              Args extra = {}) {
  Args args = {"--selftest",
               "--num-machines",
               std::to_string(machines),
               "--num-processes",
               std::to_string(processes),
               "--master-port",
               std::to_string(port),
               "--rendezvous-timeout",
               "20",
               "--batch-size",
               std::to_string(machines * processes * 2)};
  if (machine_id) args.insert(args.end(), {"--machine-id", std::to_string(*machine_id)});
  return Concat(args, extra);
}

// The first line a process wrote.
class MultiMachineTest : public ::testing::Test {
 protected:
  // Orphans of killed launchers become our children, so the test can see all of them.
  void SetUp() override { prctl(PR_SET_CHILD_SUBREAPER, 1); }
};

// Differing flags that change the math: refused at the join, naming the flag and both values,
// and the job stops on machine 0 too.
class SettingsAtTheJoinTest : public MultiMachineTest,
                              public ::testing::WithParamInterface<std::pair<Args, Args>> {};

TEST_P(SettingsAtTheJoinTest, ADifferentValueOnAnotherMachineIsRefused) {
  const auto& [mine, theirs] = GetParam();
  LauncherProcess machine0(Selftest(2, 0, 1, 0, theirs), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Selftest(2, 1, 1, port, mine), OutputPath("m1"));
  const auto status1 = machine1.Wait(20s);
  const auto status0 = machine0.Wait(20s);
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << machine0.Output();
  const std::string message =
      mine[0] + " differs between machines: this machine (--machine-id 1) has " + mine[1] +
      ", machine 0 has " + theirs[1] + "; pass the same value to every launcher";
  EXPECT_TRUE(Contains(machine1.Output(), "[launcher 1] error: " + message)) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "machine 1 could not join: " + message))
      << machine0.Output();
  // It reached the store: not "never joined".
  EXPECT_FALSE(Contains(machine0.Output(), "machine 1 never joined")) << machine0.Output();
}

INSTANTIATE_TEST_SUITE_P(
    MathChangingFlags, SettingsAtTheJoinTest,
    ::testing::Values(std::make_pair(Args{"--lr", "0.1"}, Args{"--lr", "0.5"}),
                      std::make_pair(Args{"--model", "mlp"}, Args{"--model", "convnet"}),
                      std::make_pair(Args{"--seed", "1"}, Args{"--seed", "2"}),
                      std::make_pair(Args{"--precision", "bf16"}, Args{"--precision", "fp32"})));

TEST_F(MultiMachineTest, ADifferentGlobalBatchIsRefused) {
  // Selftest() sets --batch-size 4 for two machines of one process; machine 1 gives 8.
  LauncherProcess machine0(Selftest(2, 0, 1, 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  Args args = Selftest(2, 1, 1, port);
  *(std::find(args.begin(), args.end(), "--batch-size") + 1) = "8";
  LauncherProcess machine1(args, OutputPath("m1"));
  EXPECT_TRUE(ExitedWith(machine1.Wait(20s), 1)) << machine1.Output();
  EXPECT_TRUE(Contains(machine1.Output(),
                       "error: --batch-size differs between machines: this machine (--machine-id "
                       "1) has 8, machine 0 has 4; pass the same value to every launcher"))
      << machine1.Output();
  EXPECT_TRUE(ExitedWith(machine0.Wait(20s), 1)) << machine0.Output();
}

#ifdef DPL_TEST_HAVE_TCP_AND_MLP
TEST_F(MultiMachineTest, TwoMachinesWithoutIdsGetIdsInJoinOrderAndEndBitIdentical) {
  JobFolder job;
  const Args args =
      Concat(job.Training(30), {"--num-machines", "2", "--master-port", std::to_string(FreePort()),
                                "--rendezvous-timeout", "30"});
  LauncherProcess a(args, OutputPath("a"));
  LauncherProcess b(args, OutputPath("b"));
  const auto status_a = a.Wait(60s);
  const auto status_b = b.Wait(60s);
  ASSERT_TRUE(ExitedWith(status_a, 0)) << Describe(status_a) << a.Output();
  ASSERT_TRUE(ExitedWith(status_b, 0)) << Describe(status_b) << b.Output();
  const std::string zero = "[launcher 0] this is machine 0 (";
  const std::string one = "[launcher 1] this is machine 1 (";
  const bool a_is_zero = Contains(a.Output(), zero);
  const std::string& output0 = a_is_zero ? a.Output() : b.Output();
  const std::string& output1 = a_is_zero ? b.Output() : a.Output();
  EXPECT_TRUE(Contains(output0, zero)) << output0;
  EXPECT_TRUE(Contains(output0, "), the machine of --master-addr 127.0.0.1")) << output0;
  EXPECT_TRUE(Contains(output1, one)) << output1;
  EXPECT_TRUE(Contains(output1, "), by the order the machines joined")) << output1;
  EXPECT_TRUE(Contains(output0, "[rank 0] training done: 30 steps")) << output0;
  const std::vector<float> rank0 = ReadFloats(job.Params(0));
  ASSERT_GT(rank0.size(), 100000u);
  EXPECT_TRUE(rank0 == ReadFloats(job.Params(1))) << "the machines' parameters differ";
}
#endif

// The environment of every worker of a two-machine job, as a plugin reads it (getenv).
TEST_F(MultiMachineTest, WorkersGetTheVariablesTorchrunGivesItsWorkers) {
  const std::string folder =
      std::filesystem::temp_directory_path().string() + "/dpl-envprobe-" + std::to_string(getpid());
  std::filesystem::create_directories(folder);
  const Args probe = {"--plugin-dir", DPL_TEST_ENVPROBE_DIR, "--backend",
                      "envprobe",     "--backend-options",   "dir=" + folder};
  // The launchers inherit values of these names, which the workers must not see; machine 0 gives
  // a variable with --env, machine 1 names one of its own.
  const Args inherited = {"env", "RANK=99", "LOCAL_RANK=7", "WORLD_SIZE=1000",
                          "DPL_TEST_GIVEN=inherited"};
  const int port = FreePort();
  LauncherProcess machine0(
      Selftest(2, 0, 2, port, Concat(probe, {"--env", "DPL_TEST_GIVEN=given on 0"})),
      OutputPath("m0"), inherited);
  LauncherProcess machine1(Selftest(2, 1, 2, port, Concat(probe, {"--env", "DPL_TEST_GIVEN"})),
                           OutputPath("m1"), inherited);
  machine0.Wait(30s);
  machine1.Wait(30s);
  // RANK=99 with WORLD_SIZE=1000 says machine 99 of 1000; the flags win and the first line says so.
  EXPECT_EQ(FirstLine(machine1.Output()),
            "[launcher 1] torchrun/Kubernetes environment: 1000 machines (WORLD_SIZE), machine 99 "
            "(RANK); flags win: --num-machines 2 (the command line), --machine-id 1 (the command "
            "line)")
      << machine1.Output();
  for (int rank = 0; rank < 4; ++rank) {
    const std::string seen = ReadFile(folder + "/rank-" + std::to_string(rank) + ".env");
    const std::string expected =
        "config_rank=" + std::to_string(rank) + "\nRANK=" + std::to_string(rank) +
        "\nLOCAL_RANK=" + std::to_string(rank % 2) + "\nROLE_RANK=" + std::to_string(rank) +
        "\nWORLD_SIZE=4\nLOCAL_WORLD_SIZE=2\nGROUP_RANK=" + std::to_string(rank / 2) +
        "\nGROUP_WORLD_SIZE=2\nROLE_WORLD_SIZE=4\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=" +
        std::to_string(port) + "\nTORCHELASTIC_RESTART_COUNT=0\nDPL_TEST_GIVEN=" +
        (rank < 2 ? "given on 0" : "inherited") + "\n";
    EXPECT_EQ(seen, expected) << "rank " << rank << "\n" << machine0.Output() << machine1.Output();
  }
  std::filesystem::remove_all(folder);
}

// Every launcher raises its soft limit of open files to the hard one (launcher/main.cpp), not
// only machine 0's store: a worker of another machine reading a thousand shards got "Too many open
// files" where machine 0's did not. Machine 1 is started here with a soft limit of 64.
TEST_F(MultiMachineTest, EveryMachinesWorkersGetTheHardLimitOfOpenFiles) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max <= 64) GTEST_SKIP() << "the hard limit of open files is " << limit.rlim_max;
  const std::string hard =
      limit.rlim_max == RLIM_INFINITY ? "unlimited" : std::to_string(limit.rlim_max);
  const int port = FreePort();
  auto machine = [&](int id) {
    return Args{"--num-machines",
                "2",
                "--machine-id",
                std::to_string(id),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                std::to_string(port),
                "--rendezvous-timeout",
                "30",
                "--",
                "sh",
                "-c",
                "echo open files: $(ulimit -Sn)"};
  };
  LauncherProcess machine0(machine(0), OutputPath("m0"));
  rlimit low = limit;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  LauncherProcess machine1(machine(1), OutputPath("m1"));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  const auto status1 = machine1.Wait(60s);
  const auto status0 = machine0.Wait(60s);
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(Contains(machine1.Output(), "open files: " + hard)) << machine1.Output();
}

TEST_F(MultiMachineTest, TorchrunsEnvironmentStartsAJobWithoutRendezvousFlags) {
  const int port = FreePort();
  auto environment = [&](int rank) {
    return Args{"env", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                "WORLD_SIZE=2", "RANK=" + std::to_string(rank)};
  };
  const Args args = {"--selftest", "--num-processes", "2", "--batch-size", "4"};
  LauncherProcess machine0(args, OutputPath("m0"), environment(0));
  LauncherProcess machine1(args, OutputPath("m1"), environment(1));
  EXPECT_TRUE(ExitedWith(machine0.Wait(30s), 0)) << machine0.Output();
  EXPECT_TRUE(ExitedWith(machine1.Wait(30s), 0)) << machine1.Output();
  EXPECT_EQ(FirstLine(machine1.Output()),
            "[launcher 1] torchrun/Kubernetes environment: 2 machines (WORLD_SIZE), machine 1 "
            "(RANK), master 127.0.0.1 (MASTER_ADDR), port " +
                std::to_string(port) + " (MASTER_PORT)");
  EXPECT_TRUE(Contains(machine0.Output(), "selftest ok: world size 4, ranks 0,1,2,3"))
      << machine0.Output();
}

#ifdef DPL_TEST_HAVE_TCP_AND_MLP
// Note [Refused launchers] in launcher/rendezvous/join.hpp: an elastic job goes on without a
// machine the join refused, and its machine 0 says why at once, and again if too few came.
TEST_F(MultiMachineTest, AnElasticJobsMachineZeroSaysWhyAMachineWasRefused) {
  JobFolder job;
  const Args args = Concat(job.Training(300),
                           {"--num-machines", "2:3", "--master-port", std::to_string(FreePort()),
                            "--checkpoint-dir", job.path() + "/checkpoints", "--join-grace", "1",
                            "--rendezvous-timeout", "6", "--machine-id"});
  LauncherProcess machine0(Concat(args, {"0", "--checkpoint-every", "20"}), OutputPath("m0"));
  LauncherProcess machine1(Concat(args, {"1", "--checkpoint-every", "30"}), OutputPath("m1"));
  const auto status1 = machine1.Wait(20s);
  const auto status0 = machine0.Wait(20s);
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << machine0.Output();
  const std::string why =
      "machine 1 could not join: --checkpoint-every differs between machines: this machine "
      "(--machine-id 1) has 30, machine 0 has 20";
  EXPECT_TRUE(Contains(machine0.Output(), "[launcher 0] warning: " + why)) << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "(--rendezvous-timeout); " + why)) << machine0.Output();
}

TEST_F(MultiMachineTest, AnElasticJobThatLosesAMachineFinishesOnTheOthersFromTheCheckpoint) {
  JobFolder job;
  const std::string checkpoints = job.path() + "/checkpoints";
  // 300 steps of 12, a checkpoint every 20; three machines of one worker: 4 per rank, then 6.
  const Args args =
      Concat(job.Training(300),
             {"--num-machines", "2:3", "--master-port", std::to_string(FreePort()),
              "--checkpoint-dir", checkpoints, "--checkpoint-every", "20", "--max-restarts", "2",
              "--join-grace", "1", "--rendezvous-timeout", "30",
              "--restart-workers"});  // the restart path; shrink_in_place_test.cpp the other
  LauncherProcess a(args, OutputPath("a")), b(args, OutputPath("b")), c(args, OutputPath("c"));
  LauncherProcess* machine0 = MachineNumbered({&a, &b, &c}, 0);
  LauncherProcess* machine2 = MachineNumbered({&a, &b, &c}, 2);
  ASSERT_NE(machine0, nullptr) << a.Output() << b.Output() << c.Output();
  ASSERT_NE(machine2, nullptr) << a.Output() << b.Output() << c.Output();
  // Mid-run: the first checkpoint is written, 280 steps are left.
  ASSERT_TRUE(WaitForFile(checkpoints + "/checkpoint-0000000020.pt", 30s)) << machine0->Output();
  ASSERT_EQ(kill(machine2->pid(), SIGKILL), 0);
  machine2->Wait(5s);
  for (LauncherProcess* launcher : {&a, &b, &c}) {
    if (launcher == machine2) continue;
    const auto status = launcher->Wait(60s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output, "[launcher 0] attempt 0 runs on 3 machines: machine 0 (")) << output;
  EXPECT_TRUE(Contains(output,
                       "[launcher 0] the job continues on 2 machines (was 3) from the newest "
                       "checkpoint: machine 2 ("))
      << output;
  EXPECT_TRUE(Contains(output, ") left; the global batch stays 12, 6 per rank (was 4)")) << output;
  EXPECT_TRUE(Contains(output, "[rank 0] resumed from " + checkpoints + "/checkpoint-")) << output;
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/checkpoint-0000000300.pt")) << output;
  const std::vector<float> rank0 = ReadFloats(job.Params(0));
  ASSERT_GT(rank0.size(), 100000u);
  EXPECT_TRUE(rank0 == ReadFloats(job.Params(1))) << "the two machines' parameters differ";
}

// --hostfile with two hosts that are this machine (127.0.0.1 and 127.0.0.2): both launchers start
// here, without ssh, and each line of theirs comes prefixed with its host.
TEST_F(MultiMachineTest, AHostfileOfThisMachinesAddressesRunsBothHereAndStopsBothOnAFailure) {
  JobFolder job;
  const std::string hostfile = job.path() + "/hosts";
  std::ofstream(hostfile) << "127.0.0.1 slots=1\n127.0.0.2 slots=1\n";
  const std::string port = std::to_string(FreePort());
  LauncherProcess runner(Concat(job.Training(20), {"--hostfile", hostfile, "--master-port", port,
                                                   "--lr-gamma", "0.5"}),
                         OutputPath("runner"));
  const auto status = runner.Wait(60s);
  const std::string output = runner.Output();
  ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << output;
  // The flag given that changes nothing is warned of once, by the runner; the launchers it starts
  // get every flag spelt out, and warn of none.
  EXPECT_TRUE(Contains(output, "[hostfile] warning: --lr-step-size and --lr-gamma have no effect"))
      << output;
  EXPECT_EQ(output.find("has no effect"), output.rfind("has no effect")) << output;
  EXPECT_TRUE(Contains(output,
                       "[hostfile] starting 2 machines: machine 0 (127.0.0.1) here, machine "
                       "1 (127.0.0.2) here"))
      << output;
  EXPECT_TRUE(Contains(output, "[127.0.0.1] [rank 0] training done: 20 steps")) << output;
  EXPECT_TRUE(Contains(output, "[127.0.0.2] [launcher 1] all 1 workers of machine 1 finished"))
      << output;
  EXPECT_TRUE(Contains(output, "[hostfile] all 2 machines finished")) << output;
  EXPECT_TRUE(ReadFloats(job.Params(0)) == ReadFloats(job.Params(1)));

  // A long run; machine 1's launcher is killed once its worker runs.
  LauncherProcess long_run(
      Concat(job.Training(1000000), {"--hostfile", hostfile, "--master-port", port}),
      OutputPath("long"));
  pid_t launcher1 = -1;
  for (int i = 0; i < 2000 && launcher1 < 0; ++i) {
    const pid_t candidate = ProcessWithArgument(
        "--machine-id 1 --num-processes 1 --master-addr 127.0.0.1 --master-port " + port + " ");
    if (candidate > 0 && !WorkersOf(candidate).empty()) launcher1 = candidate;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GT(launcher1, 0) << long_run.Output();
  ASSERT_EQ(kill(launcher1, SIGKILL), 0);
  const auto stopped = long_run.Wait(30s);
  const std::string long_output = long_run.Output();
  EXPECT_TRUE(ExitedWith(stopped, 1)) << Describe(stopped) << long_output;
  EXPECT_TRUE(Contains(long_output,
                       "[hostfile] error: machine 1 (127.0.0.2) ended: killed by "
                       "signal 9 (SIGKILL)"))
      << long_output;
  EXPECT_TRUE(Contains(long_output, "[hostfile] error: job failed: ")) << long_output;
  EXPECT_FALSE(Contains(long_output, "machine 0 (127.0.0.1) ended: exit code 0")) << long_output;
}
#endif

}  // namespace
}  // namespace dpl::test
