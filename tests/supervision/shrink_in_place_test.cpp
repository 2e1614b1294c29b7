// Shrink in place (Note [Shrink in place] in launcher/training/live_state.hpp): three launchers of
// an elastic job on loopback, the process group of the machine of rank 2 killed at a moment of
// a step (the test model holds that rank there: faulty_model.cpp's hold_dir) or while rank 0
// writes a checkpoint, and a new machine started after each kill. The survivors' workers must
// keep their processes and go on from the newest step any of them committed (rank 0 records
// every step it commits in --metrics: none twice), the new machine's workers must get the state
// from them, and every rank's parameters must be the same bits at the end.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "elastic_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 120;
constexpr auto kRegroupBound = 10s;

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The newest checkpoint folder (the form of --shard-optimizer on) in `dir`; "" when none.
std::string NewestCheckpointFolder(const std::string& dir) {
  std::string newest;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("checkpoint-", 0) != 0) continue;
    if (name.find('.') != std::string::npos) continue;  // a staging folder
    if (newest.empty() || name > std::filesystem::path(newest).filename().string()) {
      newest = entry.path().string();
    }
  }
  return newest;
}

// How often each step occurs in the step records of a --metrics file.
std::map<int64_t, int> StepCounts(const std::string& path) {
  std::map<int64_t, int> counts;
  std::ifstream in(path);
  const std::string key = "\"step\": ";
  for (std::string line; std::getline(in, line);) {
    if (!Contains(line, "\"kind\": \"step\"")) continue;
    const size_t at = line.find(key);
    if (at != std::string::npos) ++counts[std::stoll(line.substr(at + key.size()))];
  }
  return counts;
}

class ShrinkInPlaceTest : public ElasticJobTest {
 protected:
  // Steps of ~15 ms with a parameter of 4 MiB, a checkpoint every 4 steps, every step recorded;
  // `more` flags after.
  Args KilledMachinesJob(const Args& more = {}) {
    ::mkdir((dir_ + "/holds").c_str(), 0755);
    ::mkdir((dir_ + "/checkpoints").c_str(), 0755);
    ::mkdir((dir_ + "/dumps").c_str(), 0755);
    Args args = WithValue(Job("gloo", "faulty", workers_,
                              {"--num-machines",
                               "2:3",
                               "--master-port",
                               std::to_string(FreePort()),
                               "--max-steps",
                               std::to_string(kSteps),
                               "--checkpoint-dir",
                               dir_ + "/checkpoints",
                               "--checkpoint-every",
                               "4",
                               "--join-grace",
                               "1",
                               "--rendezvous-timeout",
                               "60",
                               "--log-interval",
                               "1",
                               "--metrics",
                               dir_ + "/metrics.jsonl",
                               "--dump-parameters",
                               dir_ + "/dumps",
                               "--model-options",
                               "step_ms=10,extra=1000000,hold_dir=" + dir_ + "/holds"}),
                          "--batch-size", "12");
    args = WithValue(args, "--plugin-dir", LightPluginDir());
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  // The final parameters of the job's `ranks` ranks are the same bits.
  void ExpectSameReplicas(int ranks) {
    const std::string rank0 = ReadWhole(dir_ + "/dumps/rank-0.bin");
    ASSERT_FALSE(rank0.empty());
    for (int rank = 1; rank < ranks; ++rank) {
      // Compared as a truth: a dump of 4 MiB would fill the log.
      EXPECT_TRUE(ReadWhole(dir_ + "/dumps/rank-" + std::to_string(rank) + ".bin") == rank0)
          << "rank " << rank << "'s parameters differ from rank 0's";
    }
  }

  // What every run of this test ends with: the state came from memory, every step rank 0
  // committed is recorded once (no committed step computed again), and the ranks' final
  // parameters are the same bits.
  void CheckTheRun(const std::string& output, int64_t last_step = kSteps) {
    EXPECT_TRUE(Contains(output, "nothing read from disk")) << output;
    EXPECT_FALSE(Contains(output, "resumed from")) << output;
    const std::map<int64_t, int> steps = StepCounts(dir_ + "/metrics.jsonl");
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.rbegin()->first, last_step);
    for (const auto& [step, count] : steps) EXPECT_EQ(count, 1) << "step " << step;
    ExpectSameReplicas(machines_ * workers_);
  }

  // The worker of `launcher` with rank `rank`, waiting for it up to 60 s; -1 when none came.
  static pid_t WorkerOf(const LauncherProcess& launcher, int rank) {
    const auto deadline = Clock::now() + 60s;
    pid_t pid = WorkerWithRank(launcher.pid(), rank);
    while (pid <= 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
      pid = WorkerWithRank(launcher.pid(), rank);
    }
    return pid;
  }

  // The kill of the machine of rank 2 at `moment`, and a new machine; checks that the
  // survivors' workers went on in their processes within kRegroupBound.
  void KillAndCheck(const Args& args, const std::string& moment, int kills_before) {
    LauncherProcess* machine0 = MachineZero();
    LauncherProcess* victim = LauncherOfRank(2, 60s);            // the rank ReachMoment holds
    const int survivor_rank = workers_ == 1 ? 1 : 2 * workers_;  // on neither of those two
    LauncherProcess* survivor = LauncherOfRank(survivor_rank, 60s);
    ASSERT_TRUE(victim != nullptr && survivor != nullptr) << machine0->Output();
    ASSERT_NE(victim, machine0);
    const pid_t rank0 = WorkerOf(*machine0, 0);
    const pid_t kept_worker = WorkerOf(*survivor, survivor_rank);
    ASSERT_TRUE(rank0 > 0 && kept_worker > 0) << machine0->Output();
    const std::string missed = ReachMoment(moment, dir_ + "/holds", dir_ + "/checkpoints");
    ASSERT_EQ(missed, "") << moment << "\n" << machine0->Output();
    ASSERT_EQ(kill(-victim->pid(), SIGKILL), 0);
    const auto killed = Clock::now();
    victim->Wait(5s);
    Start(args);
    const double running =
        SecondsUntil(*machine0, "[rank 0] continuing from step", kills_before + 1, killed);
    std::cout << "kill at " << moment << ": training again after " << running << " s\n";
    RecordProperty("kill_" + std::to_string(kills_before) + "_" + moment, std::to_string(running));
    EXPECT_LT(running, std::chrono::duration<double>(kRegroupBound).count()) << moment << "\n"
                                                                             << machine0->Output();
    EXPECT_EQ(WorkerWithRank(machine0->pid(), 0), rank0) << "rank 0's process changed";
    const std::vector<pid_t> kept = WorkersOf(survivor->pid());
    EXPECT_NE(std::find(kept.begin(), kept.end(), kept_worker), kept.end())
        << "the survivor's worker (pid " << kept_worker << ") is gone\n"
        << survivor->Output();
  }

  // The final parameters of rank 0 of the job of `args` run again on three machines, none killed.
  std::string StraightRun(Args args) {
    const std::string straight = dir_ + "/straight";
    ::mkdir(straight.c_str(), 0755);
    for (const char* flag : {"--dump-parameters", "--checkpoint-dir"}) {
      args = WithValue(args, flag, straight);
    }
    args = WithValue(args, "--metrics", straight + "/metrics.jsonl");
    args = WithValue(args, "--master-port", std::to_string(FreePort()));
    std::vector<LauncherProcess*> machines;
    for (int i = 0; i < 3; ++i) machines.push_back(Start(args));
    for (LauncherProcess* machine : machines) {
      const auto status = machine->Wait(120s);
      EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << machine->Output();
    }
    return ReadWhole(straight + "/rank-0.bin");
  }

  // Kills a machine at each moment of a step in a job of `args`, a new machine after each.
  void KillAtEveryMoment(const Args& args) {
    for (int i = 0; i < 3; ++i) Start(args);
    LauncherProcess* machine0 = MachineZero();
    ASSERT_NE(machine0, nullptr);
    const std::vector<std::string> moments = {"forward", "backward", "reported", "optimizer",
                                              "checkpoint"};
    for (size_t k = 0; k < moments.size(); ++k) {
      KillAndCheck(args, moments[k], int(k));
      if (HasFatalFailure()) return;
    }
    for (auto& launcher : launchers_) {
      if (launcher->Wait(0s)) continue;  // a victim
      const auto status = launcher->Wait(120s);
      EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
    }
    const std::string output = machine0->Output();
    EXPECT_GE(Occurrences(output, "in place, from the newest step a worker holds"),
              int(moments.size()))
        << output;
    CheckTheRun(output);
  }

  int workers_ = 1;   // a machine's
  int machines_ = 3;  // at the end
};

TEST_F(ShrinkInPlaceTest, KilledMachinesLeaveTheSurvivorsRunningAndLoseNoCommittedStep) {
  const Args args = KilledMachinesJob();
  KillAtEveryMoment(args);
  EXPECT_TRUE(ReadWhole(dir_ + "/dumps/rank-0.bin") == StraightRun(args))
      << "the parameters differ from those of the same job with no machine lost";
}

// Note [A machine's shared memory over a regroup] (local_reduce.cpp): two workers a machine that
// sum through its shared memory (the CPU's default) keep their processes too, and their sums of
// the next attempt start from clean shared memory.
TEST_F(ShrinkInPlaceTest, WorkersThatSumInSharedMemoryKeepTheirProcesses) {
  workers_ = 2;
  const Args args = KilledMachinesJob({"--local-reduce", "shm"});
  KillAtEveryMoment(args);
  EXPECT_TRUE(ReadWhole(dir_ + "/dumps/rank-0.bin") == StraightRun(args))
      << "the parameters differ from those of the same job with no machine lost";
}

// Note [A copy of each part] (part_copy.hpp): each rank holds its part of AdamW's state and a copy
// of the next machine's, so the killed machine's part comes from the rank that kept its copy.
TEST_F(ShrinkInPlaceTest, TheShardedOptimizerLosesNoPartWithAMachine) {
  const Args args = KilledMachinesJob(
      {"--shard-optimizer", "on", "--local-reduce", "backend", "--optimizer", "adamw"});
  KillAtEveryMoment(args);
  const std::string output = MachineZero()->Output();
  EXPECT_TRUE(Contains(output, "also keeps a copy of the optimizer's state")) << output;
  EXPECT_TRUE(Contains(output, "the optimizer's 3 parts from the ranks that held them")) << output;
  // The new machine takes the lost one's rank and data, so the run's every step is the straight
  // run's: the state handed over is the bits the lost ranks held, AdamW's moments and count too.
  EXPECT_TRUE(ReadWhole(dir_ + "/dumps/rank-0.bin") == StraightRun(args))
      << "the parameters differ from those of the same job with no machine lost";
}

// Two machines lost at once took both holders of a part with them: the survivor says so and goes
// on from the newest checkpoint.
TEST_F(ShrinkInPlaceTest, TwoMachinesLostAtOnceFallBackToTheNewestCheckpoint) {
  const Args args =
      WithValue(WithValue(KilledMachinesJob({"--shard-optimizer", "on", "--local-reduce", "backend",
                                             "--optimizer", "adamw"}),
                          "--max-steps", "400"),
                "--num-machines", "1:3");
  for (int i = 0; i < 3; ++i) Start(args);
  LauncherProcess* machine0 = MachineZero();
  ASSERT_NE(machine0, nullptr);
  LauncherProcess* first = LauncherOfRank(1, 60s);
  LauncherProcess* second = LauncherOfRank(2, 60s);
  ASSERT_TRUE(first != nullptr && second != nullptr) << machine0->Output();
  while (StepCounts(dir_ + "/metrics.jsonl").size() < 10 && !machine0->Wait(0s)) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(kill(-first->pid(), SIGKILL), 0);
  ASSERT_EQ(kill(-second->pid(), SIGKILL), 0);
  const auto status = machine0->Wait(120s);
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << machine0->Output();
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output, "took part of the optimizer's state with them")) << output;
  EXPECT_TRUE(Contains(output, "resumed from")) << output;
}

// Note [A preemption while the machines meet] in launcher/supervision/elastic_job.cpp: a launcher
// asked to preempt while it waits for the job's machines (two of at least three here) keeps
// waiting; the third comes, the attempt forms, its workers write the preemption's checkpoint at
// their first step boundary, and every launcher exits 75. (It ended its wait at once, exit 1, and
// the others waited out the rendezvous timeout.)
TEST_F(ShrinkInPlaceTest, APreemptionWhileTheMachinesMeetIsCarriedOut) {
  const Args args = WithValue(KilledMachinesJob(), "--num-machines", "3:4");
  Start(args);
  LauncherProcess* waiting = Start(args);
  const auto deadline = Clock::now() + 30s;
  while (!Contains(waiting->Output(), "this is machine") && Clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  std::this_thread::sleep_for(500ms);  // in its wait for the third machine
  ASSERT_EQ(kill(waiting->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(1s);
  Start(args);
  for (auto& launcher : launchers_) {
    const auto status = launcher->Wait(60s);
    EXPECT_TRUE(ExitedWith(status, 75)) << Describe(status) << launcher->Output();
  }
  EXPECT_TRUE(Contains(waiting->Output(), "a preemption was asked by signal 15 (SIGTERM)"))
      << waiting->Output();
}

// Note [Leaving an elastic job] in launcher/supervision/supervisor_regroup.cpp: Ctrl-C in one
// machine's terminal (SIGINT to its process group) takes that machine out; the others go on in
// place, as after a kill, instead of failing and restarting from the newest checkpoint.
TEST_F(ShrinkInPlaceTest, CtrlCOnOneMachineLetsTheOthersGoOnInPlace) {
  const Args args = KilledMachinesJob();
  for (int i = 0; i < 3; ++i) Start(args);
  LauncherProcess* machine0 = MachineZero();
  ASSERT_NE(machine0, nullptr);
  LauncherProcess* leaving = LauncherOfRank(2, 60s);
  ASSERT_NE(leaving, nullptr) << machine0->Output();
  while (StepCounts(dir_ + "/metrics.jsonl").size() < 10 && !machine0->Wait(0s)) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(kill(-leaving->pid(), SIGINT), 0);
  const auto left = leaving->Wait(30s);
  EXPECT_TRUE(ExitedWith(left, 1)) << Describe(left) << leaving->Output();
  EXPECT_TRUE(Contains(leaving->Output(), "this machine leaves the job")) << leaving->Output();
  for (auto& launcher : launchers_) {
    if (launcher.get() == leaving) continue;
    const auto status = launcher->Wait(90s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output, "the job continues on 2 machines (was 3) in place")) << output;
  EXPECT_FALSE(Contains(output, "restarting the job")) << output;
  ExpectSameReplicas(2);
}

// Messages name a machine by its --machine-id, not by its place in the attempt (the join order):
// machine 2, which joined second, is "machine 2" when it vanishes.
TEST_F(ShrinkInPlaceTest, ALostMachineIsNamedByItsIdNotItsPlace) {
  const Args args = KilledMachinesJob();
  const auto with_id = [&](const std::string& id) {
    Args given = args;
    given.insert(given.end(), {"--machine-id", id});
    return given;
  };
  LauncherProcess* machine0 = Start(with_id("0"));
  LauncherProcess* second = Start(with_id("2"));
  std::this_thread::sleep_for(300ms);
  Start(with_id("1"));
  while (StepCounts(dir_ + "/metrics.jsonl").size() < 10 && !machine0->Wait(0s)) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(Contains(machine0->Output(), "machine 1 (vm")) << machine0->Output();
  ASSERT_EQ(kill(-second->pid(), SIGKILL), 0);
  const auto status = machine0->Wait(90s);
  const std::string output = machine0->Output();
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "regroups, its workers running: machine 2 vanished")) << output;
  EXPECT_FALSE(Contains(output, "machine 1 vanished")) << output;
}

// A machine that comes while two train is trained in at a step boundary with the state of the
// running workers, which keep their processes.
TEST_F(ShrinkInPlaceTest, AMachineThatComesIsTrainedInFromTheRunningWorkers) {
  // With --trace: the running workers align their clocks again with the new machine's.
  const Args args =
      WithValue(KilledMachinesJob({"--trace", dir_ + "/trace.json"}), "--max-steps", "400");
  for (int i = 0; i < 2; ++i) Start(args);
  LauncherProcess* machine0 = MachineZero();
  ASSERT_NE(machine0, nullptr);
  ASSERT_NE(LauncherOfRank(1, 60s), nullptr) << machine0->Output();
  while (StepCounts(dir_ + "/metrics.jsonl").size() < 20 && !machine0->Wait(0s)) {
    std::this_thread::sleep_for(10ms);
  }
  const pid_t rank0 = WorkerOf(*machine0, 0);
  LauncherProcess* second = LauncherOfRank(1, 1s);
  ASSERT_NE(second, nullptr);
  const pid_t rank1 = WorkerOf(*second, 1);
  const auto came = Clock::now();
  Start(args);
  const double running = SecondsUntil(*machine0, "[rank 0] continuing from step", 1, came);
  std::cout << "a machine came: training on three after " << running << " s\n";
  RecordProperty("join_seconds", std::to_string(running));
  EXPECT_EQ(WorkerWithRank(machine0->pid(), 0), rank0) << "rank 0's process changed";
  const std::vector<pid_t> kept = WorkersOf(second->pid());
  EXPECT_NE(std::find(kept.begin(), kept.end(), rank1), kept.end()) << second->Output();
  for (auto& launcher : launchers_) {
    const auto status = launcher->Wait(120s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output, "a machine joins")) << output;
  EXPECT_TRUE(Contains(output, "the job continues on 3 machines (was 2) in place")) << output;
  CheckTheRun(output, 400);
  const std::string trace = ReadWhole(dir_ + "/trace.json");
  for (const char* rank : {"\"rank 0 (machine 0", "\"rank 1 (machine 1", "\"rank 2 (machine 2"}) {
    EXPECT_TRUE(Contains(trace, rank)) << rank << " is not in the trace\n" << output;
  }
}

// With the shared-memory sums across machines every machine holds each part of the sharded
// optimizer's state (Note [Sharded optimizer] in update_share.hpp): the lost machine's parts come
// from the ranks of the same local rank that are left, and a checkpoint folder gets each once.
TEST_F(ShrinkInPlaceTest, TheShardedOptimizerOnSharedMemorySumsLosesNoPartWithAMachine) {
  workers_ = 2;
  const Args args = KilledMachinesJob({"--shard-optimizer", "on", "--optimizer", "adamw"});
  KillAtEveryMoment(args);
  const std::string output = MachineZero()->Output();
  EXPECT_TRUE(Contains(output, "the optimizer's 2 parts from the ranks that held them")) << output;
  const std::string newest = NewestCheckpointFolder(dir_ + "/checkpoints");
  ASSERT_FALSE(newest.empty());
  for (int rank = 0; rank < 6; ++rank) {
    char name[64];
    std::snprintf(name, sizeof name, "/optimizer-%05d-of-00006.pt", rank);
    const size_t bytes = ReadWhole(newest + name).size();
    if (rank < 2) {
      EXPECT_GT(bytes, 1000000u) << name;
    } else {
      EXPECT_LT(bytes, 10000u) << name << ": a part machine 0 wrote already";
    }
  }
  EXPECT_TRUE(ReadWhole(dir_ + "/dumps/rank-0.bin") == StraightRun(args))
      << "the parameters differ from those of the same job with no machine lost";
}

// The CPU's default on one machine of two workers shards the optimizer over the machine's one copy
// of the parameters (Note [Sharding by default] in placement.cpp); a second machine that comes is
// trained in from the running workers all the same, which keep their processes.
TEST_F(ShrinkInPlaceTest, AMachineThatComesToOneOfTwoWorkersIsTrainedInFromThem) {
  workers_ = 2;
  machines_ = 2;
  const Args args =
      WithValue(WithValue(KilledMachinesJob(), "--max-steps", "300"), "--num-machines", "1:2");
  LauncherProcess* machine0 = Start(args);
  while (StepCounts(dir_ + "/metrics.jsonl").size() < 20 && !machine0->Wait(0s)) {
    std::this_thread::sleep_for(10ms);
  }
  const pid_t rank1 = WorkerOf(*machine0, 1);
  const auto came = Clock::now();
  Start(args);
  SecondsUntil(*machine0, "[rank 0] continuing from step", 1, came);
  EXPECT_EQ(WorkerWithRank(machine0->pid(), 1), rank1) << "rank 1's process changed";
  for (auto& launcher : launchers_) {
    const auto status = launcher->Wait(120s);
    EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  EXPECT_TRUE(Contains(output, "the job continues on 2 machines (was 1) in place")) << output;
  CheckTheRun(output, 300);
}

}  // namespace
}  // namespace dpl::test
