// Preemption (Note [Preemption] in launcher/training/preemption.cpp): SIGTERM or SIGUSR1 to a
// launcher or to one worker of a job that writes checkpoints makes every rank stop after the
// checkpoint of one and the same step, the launchers exit with the preempted status, and
// --resume continues bit for bit as if the job had not stopped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "protocol/worker_output.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_folder.hpp"
#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSteps = 400;

std::string ReadText(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// Polls until rank 0 logged `steps` steps (--log-interval 1).
bool WaitForSteps(const LauncherProcess& process, int steps) {
  const auto deadline = Clock::now() + 60s;
  while (Occurrences(process.Output(), "training loss") < steps) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// The step rank 0 says every rank stopped after, or -1.
int64_t PreemptedStep(const std::string& output) {
  const std::regex line(
      "\\[rank 0\\] preempted: every rank stops after step ([0-9]+); its "
      "checkpoint is ");
  std::smatch match;
  return std::regex_search(output, match, line) ? std::stoll(match[1]) : -1;
}

class PreemptionTest : public TrainingJobTest {
 protected:
  // The mlp on 2 ranks per machine through tcp, kSteps steps, each step logged; parameters dumped
  // into `params`, checkpoints (only at the end and on preemption) into dir_/checkpoints.
  Args Training(const std::string& params, const Args& extra) const {
    std::filesystem::create_directories(params);
    return Job("tcp", "mlp", 2,
               Concat({"--max-steps", std::to_string(kSteps), "--log-interval", "1",
                       "--dump-parameters", params},
                      extra));
  }
  std::string checkpoints() const { return dir_ + "/checkpoints"; }
  void SigtermThenResume(const Args& extra, bool folder);
  static Args Concat(Args head, const Args& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  }
};

// SIGTERM to the launcher of a job with `extra` flags: every rank stops after one step, whose
// checkpoint (a folder of parts when `folder`) is complete on disk, and --resume ends as the
// straight run does, bit for bit.
void PreemptionTest::SigtermThenResume(const Args& extra, bool folder) {
  LauncherProcess reference(Training(dir_ + "/reference", {"--master-port", "0"}),
                            OutputPath("reference"));
  ASSERT_TRUE(ExitedWith(reference.Wait(120s), 0)) << reference.Output();

  const Args preemptible = Training(
      dir_ + "/resumed",
      Concat({"--master-port", "0", "--checkpoint-dir", checkpoints(), "--log-dir", dir_ + "/logs"},
             extra));
  LauncherProcess first(preemptible, OutputPath("first"));
  ASSERT_TRUE(WaitForSteps(first, 40)) << first.Output();
  ASSERT_EQ(kill(first.pid(), SIGTERM), 0);
  const auto status = first.Wait(30s);
  const std::string output = first.Output();
  EXPECT_TRUE(ExitedWith(status, protocol::kPreemptedExitCode)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output,
                       "[launcher 0] a preemption was asked by signal 15 (SIGTERM): every "
                       "rank writes the checkpoint of the next step boundary, then stops"))
      << output;
  const int64_t step = PreemptedStep(output);
  ASSERT_GE(step, 40) << output;
  ASSERT_LT(step, kSteps) << output;
  const std::string checkpoint =
      checkpoints() + "/" +
      (folder ? training::CheckpointFolderName(step) : training::CheckpointFileName(step));
  EXPECT_TRUE(Contains(output, "every rank stops after step " + std::to_string(step) +
                                   "; its checkpoint is " + checkpoint))
      << output;
  // Complete before any worker exited: the folder with its manifest.
  EXPECT_TRUE(std::filesystem::exists(checkpoint)) << output;
  EXPECT_EQ(training::IsCompleteCheckpointFolder(checkpoint), folder) << output;
  EXPECT_TRUE(Contains(ReadText(dir_ + "/logs/rank-1.log"),
                       "[rank 1] preempted: stopping after step " + std::to_string(step) +
                           (folder ? ", whose checkpoint every rank wrote its part of"
                                   : ", whose checkpoint rank 0 wrote")));
  EXPECT_TRUE(Contains(output,
                       "[launcher 0] the job stopped for a preemption after writing a "
                       "checkpoint (exit code 75)"))
      << output;

  LauncherProcess resumed(Concat(preemptible, {"--resume"}), OutputPath("resumed"));
  ASSERT_TRUE(ExitedWith(resumed.Wait(120s), 0)) << resumed.Output();
  EXPECT_TRUE(Contains(resumed.Output(), "[rank 0] resumed from " + checkpoint + " "))
      << resumed.Output();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string name = "/rank-" + std::to_string(rank) + ".bin";
    const std::string expected = ReadText(dir_ + "/reference" + name);
    ASSERT_GT(expected.size(), 1000u);
    EXPECT_TRUE(ReadText(dir_ + "/resumed" + name) == expected) << "rank " << rank << " differs";
  }
}

TEST_F(PreemptionTest, SigtermCheckpointsEveryRankAtOneStepAndResumeIsBitIdentical) {
  SigtermThenResume({}, /*folder=*/false);
}

// Note [Checkpoint forms]: with --shard-optimizer on each rank writes its part, and the folder is
// complete, manifest and all, before any worker exits.
TEST_F(PreemptionTest, SigtermWithAShardedOptimizerLeavesTheWholeFolderAndResumesBitIdentical) {
  SigtermThenResume({"--shard-optimizer", "on"}, /*folder=*/true);
}

// A scheduler may signal one worker only (Slurm's --signal reaches every task's processes, but
// in turn): SIGUSR1 to rank 3, on machine 1 of two. Every rank of both machines stops after the
// same step, and both launchers exit with the preempted status.
TEST_F(PreemptionTest, SigusrOneToOneWorkerOfTwoMachinesStopsEveryRankAtTheSameStep) {
  const int port = FreePort();
  auto machine = [&](int id) {
    return Training(dir_ + "/params",
                    {"--num-machines", "2", "--machine-id", std::to_string(id), "--master-port",
                     std::to_string(port), "--checkpoint-dir", checkpoints(), "--log-dir",
                     dir_ + "/logs" + std::to_string(id)});
  };
  LauncherProcess machine0(machine(0), OutputPath("m0"));
  LauncherProcess machine1(machine(1), OutputPath("m1"));
  ASSERT_TRUE(WaitForSteps(machine0, 30)) << machine0.Output() << machine1.Output();
  const pid_t rank3 = WorkerWithRank(machine1.pid(), 3);
  ASSERT_GT(rank3, 0) << machine1.Output();
  ASSERT_EQ(kill(rank3, SIGUSR1), 0);
  const auto status0 = machine0.Wait(30s);
  const auto status1 = machine1.Wait(30s);
  EXPECT_TRUE(ExitedWith(status0, protocol::kPreemptedExitCode))
      << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, protocol::kPreemptedExitCode))
      << Describe(status1) << machine1.Output();
  const int64_t step = PreemptedStep(machine0.Output());
  ASSERT_GT(step, 0) << machine0.Output();
  for (int rank = 1; rank < 4; ++rank) {
    const std::string log = ReadText(dir_ + "/logs" + std::to_string(rank / 2) + "/rank-" +
                                     std::to_string(rank) + ".log");
    EXPECT_TRUE(Contains(log, "[rank " + std::to_string(rank) +
                                  "] preempted: stopping after step " + std::to_string(step) + ","))
        << log;
  }
  EXPECT_TRUE(std::filesystem::exists(checkpoints() + "/" + training::CheckpointFileName(step)));
}

}  // namespace
}  // namespace dpl::test
