// Machines lost in the middle of an elastic job (Note [Lost machines] in
// launcher/supervision/heartbeat.hpp): three launchers on loopback, each in a process group of
// its own, and the process group of the machine at place 2 killed at chosen moments of a step
// (the test model holds that rank there: faulty_model.cpp's hold_dir) or while rank 0 writes a
// checkpoint. Each time the survivors' next attempt must run (its ranks connected) within 10 s of
// the kill. And a machine beyond the job's most, which waits for a place and is never lost.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "elastic_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kRestartBound = 10s;

class LostMachinesTest : public ElasticJobTest {
 protected:
  // Steps of ~15 ms with a parameter of 4 MiB: allreduces, optimizer steps and checkpoints long
  // enough to be caught in; a checkpoint every 4 steps; up to three machines, ten restarts.
  Args KilledMachinesJob(const std::string& holds, const std::string& checkpoints) {
    Args args =
        WithValue(Job("gloo", "faulty", 1,
                      {"--num-machines",       "2:3",
                       "--master-port",        std::to_string(FreePort()),
                       "--max-steps",          "300",
                       "--max-restarts",       "10",
                       "--checkpoint-dir",     checkpoints,
                       "--checkpoint-every",   "4",
                       "--join-grace",         "1",
                       "--rendezvous-timeout", "60",
                       "--log-interval",       "50",
                       "--model-options",      "step_ms=10,extra=1000000,hold_dir=" + holds}),
                  "--batch-size", "12");
    args = WithValue(args, "--plugin-dir", LightPluginDir());
    args.push_back("--restart-workers");  // the restart path; shrink_in_place_test.cpp the other
    return args;
  }

  // Three machines of KilledMachinesJob (its folders made, its flags in `*args`): machine 0, the
  // store's, or null.
  LauncherProcess* StartThreeMachines(const std::string& holds, const std::string& checkpoints,
                                      Args* args) {
    ::mkdir(holds.c_str(), 0755);
    ::mkdir(checkpoints.c_str(), 0755);
    *args = KilledMachinesJob(holds, checkpoints);
    for (int i = 0; i < 3; ++i) Start(*args);
    return MachineZero();
  }
};

TEST_F(LostMachinesTest, EachOfTenKillsOfMachineTwoRestartsTheSurvivorsWithin10s) {
  const std::string holds = dir_ + "/holds", checkpoints = dir_ + "/checkpoints";
  Args args;
  LauncherProcess* machine0 = StartThreeMachines(holds, checkpoints, &args);
  ASSERT_NE(machine0, nullptr);
  const std::vector<std::string> moments = {"forward",    "backward",  "reported", "optimizer",
                                            "checkpoint", "forward",   "backward", "reported",
                                            "optimizer",  "checkpoint"};
  for (size_t kill_index = 0; kill_index < moments.size(); ++kill_index) {
    LauncherProcess* victim = LauncherOfRank(2, 60s);
    ASSERT_NE(victim, nullptr) << "kill " << kill_index << ": no machine runs rank 2\n"
                               << machine0->Output();
    ASSERT_NE(victim, machine0);
    const std::string missed = ReachMoment(moments[kill_index], holds, checkpoints);
    ASSERT_EQ(missed, "") << "kill " << kill_index << "\n" << machine0->Output();
    ASSERT_EQ(kill(-victim->pid(), SIGKILL), 0);
    const auto killed = Clock::now();
    victim->Wait(5s);
    // A new machine comes at once, so the next attempt has three again; not after the last.
    if (kill_index + 1 < moments.size()) Start(args);
    // Decided: the coordinator's line on the new members. Running: its rank 0 connected the
    // backend with every other rank of the new attempt.
    const double decided =
        SecondsUntil(*machine0, "the job continues on", int(kill_index) + 1, killed);
    const double running = SecondsUntil(*machine0, "[rank 0] --backend gloo was requested",
                                        int(kill_index) + 2, killed);
    const std::string name =
        "kill " + std::to_string(kill_index) + " (" + moments[kill_index] + ")";
    RecordProperty(
        "kill_" + std::to_string(kill_index) + "_" + moments[kill_index],
        std::to_string(decided) + " s decided, " + std::to_string(running) + " s running");
    std::cout << name << ": the next attempt decided after " << decided << " s, running after "
              << running << " s\n";
    EXPECT_LT(running, std::chrono::duration<double>(kRestartBound).count()) << name << "\n"
                                                                             << machine0->Output();
  }
  for (auto& launcher : launchers_) {
    if (launcher->Wait(0s)) continue;  // a victim
    const auto status = launcher->Wait(120s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output,
                       "the job continues on 2 machines (was 3) from the newest "
                       "checkpoint: machine "))
      << output;
  EXPECT_EQ(Occurrences(output, "the job continues on"), 10) << output;
  EXPECT_TRUE(Contains(output, "[rank 0] training done: 300 steps")) << output;
}

// A machine that leaves between the membership of an attempt and its workers' start never beats
// in it: after kMachineNeverBegan (20 s) it is lost and the job restarts without it (the others'
// workers still wait to connect to its ranks, so they cannot regroup in place), instead of
// waiting for its ranks, silent, until the rendezvous timeout.
TEST_F(LostMachinesTest, AMachineThatLeavesBeforeItsAttemptBeginsIsLostToo) {
  Args args =
      WithValue(Job("gloo", "faulty", 1,
                    {"--num-machines", "1:3", "--master-port", std::to_string(FreePort()),
                     "--max-steps", "20", "--checkpoint-dir", dir_ + "/checkpoints", "--join-grace",
                     "5", "--rendezvous-timeout", "120", "--model-options", "step_ms=10"}),
                "--plugin-dir", LightPluginDir());
  args = WithValue(args, "--batch-size", "12");  // splits over 1, 2 and 3 machines
  args.insert(args.end(), {"--max-restarts", "2"});
  Start(args);
  LauncherProcess* machine0 = MachineZero();
  ASSERT_NE(machine0, nullptr);
  LauncherProcess* leaving = Start(args);
  const auto deadline = Clock::now() + 30s;
  while (!Contains(leaving->Output(), "this is machine 1 (") && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(Contains(leaving->Output(), "this is machine 1 (")) << leaving->Output();
  // It takes its slot of attempt 0 right after it claims its id, a moment later on a loaded
  // machine; killed before that, it would never have been a member. The join grace is 5 s.
  std::this_thread::sleep_for(1s);
  ASSERT_EQ(kill(-leaving->pid(), SIGKILL), 0);  // within the join grace: a member of attempt 0
  leaving->Wait(5s);
  const auto status = machine0->Wait(90s);
  const std::string output = machine0->Output();
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "attempt 0 runs on 2 machines")) << output;
  EXPECT_TRUE(Contains(output, "machine 1 vanished")) << output;
  EXPECT_TRUE(Contains(output, "it never began this attempt")) << output;
  EXPECT_TRUE(Contains(output, "[rank 0] training done: 20 steps")) << output;
}

// A machine beyond the job's most (MAX) waits for a place; when the job ends first, it ends with
// it, exit 0, instead of finding the store gone between two looks (Note [Elastic membership]).
// With the built-in store, machine 0's launcher holds the job's store: killed, the job ends with
// it. The survivors say so, and that they cannot restart, instead of "restarting the job" and
// failing in the same millisecond.
TEST_F(LostMachinesTest, TheJobEndsWithMachineZerosStoreWithoutClaimingARestart) {
  const std::string holds = dir_ + "/holds", checkpoints = dir_ + "/checkpoints";
  Args args;
  LauncherProcess* machine0 = StartThreeMachines(holds, checkpoints, &args);
  ASSERT_NE(machine0, nullptr);
  ASSERT_EQ(ReachMoment("checkpoint", holds, checkpoints), "") << machine0->Output();
  ASSERT_EQ(kill(-machine0->pid(), SIGKILL), 0);
  for (auto& launcher : launchers_) {
    if (launcher.get() == machine0) continue;
    const auto status = launcher->Wait(90s);
    const std::string output = launcher->Output();
    EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
    EXPECT_TRUE(Contains(output, "job failed, and cannot restart (")) << output;
    EXPECT_FALSE(Contains(output, "restarting the job")) << output;
  }
}

TEST_F(LostMachinesTest, AMachineBeyondTheMostEndsWithTheJob) {
  const std::string holds = dir_ + "/holds";
  ::mkdir(holds.c_str(), 0755);
  Args args =
      WithValue(Job("gloo", "faulty", 1,
                    {"--num-machines", "1:2", "--master-port", std::to_string(FreePort()),
                     "--max-steps", "20", "--checkpoint-dir", dir_ + "/checkpoints", "--join-grace",
                     "1", "--model-options", "step_ms=10,hold_ms=8000,hold_dir=" + holds}),
                "--plugin-dir", LightPluginDir());
  args = WithValue(args, "--batch-size", "12");
  std::ofstream(holds + "/hold-0-forward").flush();  // the job runs until the third is waiting
  Start(args);
  Start(args);
  ASSERT_TRUE(elastic_jobs::WaitForPath(holds + "/held-0-forward", 60s));
  LauncherProcess* beyond = Start(args);
  const auto deadline = Clock::now() + 30s;
  while (!Contains(beyond->Output(), "without this one") && Clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(Contains(beyond->Output(), "runs on 2 machines without this one"))
      << beyond->Output();
  for (auto& launcher : launchers_) {
    const auto status = launcher->Wait(90s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  EXPECT_TRUE(Contains(beyond->Output(), "the job finished without this machine"))
      << beyond->Output();
}

}  // namespace
}  // namespace dpl::test
