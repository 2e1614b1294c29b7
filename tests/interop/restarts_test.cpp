// kill -9 of a worker mid-run with --max-restarts 1: the job resumes from its newest checkpoint
// and ends with the parameters of a run that was never killed, bit for bit, with dropout on (the
// checkpoint carries the random generators' state): the recipe's ConvNet scripted from Python,
// and dpl's own C++ ConvNet.
#include <signal.h>

#include <thread>

#include "interop_support.hpp"

namespace dpl::interop_test {
namespace {

using namespace std::chrono_literals;

struct RestartCase {
  const char* name;
  bool torchscript;
};

void PrintTo(const RestartCase& restart_case, std::ostream* out) {
  *out << restart_case.name;
}

class KilledWorker : public InteropTest, public ::testing::WithParamInterface<RestartCase> {
 protected:
  Args Training(const std::string& dump) const {
    Args model = {"--model", "convnet"};
    if (GetParam().torchscript) {
      model = {"--model", "torchscript", "--model-options", "file=" + Fixture("convnet.pt")};
    }
    Args args = {"--backend",
                 "gloo",
                 "--num-processes",
                 "2",
                 "--batch-size",
                 "64",
                 "--max-steps",
                 "40",
                 "--log-interval",
                 "10",
                 "--no-eval",
                 "--seed",
                 "5",
                 "--dump-parameters",
                 dump};
    args.insert(args.end(), model.begin(), model.end());
    return args;
  }
};

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST_P(KilledWorker, ResumedRunEndsBitIdenticalToAStraightRun) {
  const std::string straight = Folder("straight"), resumed = Folder("resumed");
  const JobResult reference = Run(Training(straight), "straight");
  ASSERT_TRUE(reference.ok()) << test::Describe(reference.status) << "\n" << reference.output;

  const std::string checkpoints = Path("checkpoints");
  Args killed = Training(resumed);
  killed.insert(killed.end(), {"--checkpoint-dir", checkpoints, "--checkpoint-every", "5",
                               "--max-restarts", "1"});
  test::LauncherProcess launcher(Job(killed), Path("killed.log"));
  // Rank 1 dies just after the first checkpoint (step 5), 35 steps before the end.
  ASSERT_TRUE(WaitForFile(checkpoints + "/checkpoint-0000000005.pt", 60s)) << launcher.Output();
  const pid_t rank1 = test::WorkerWithRank(launcher.pid(), 1);
  ASSERT_GT(rank1, 0) << launcher.Output();
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  const std::optional<int> status = launcher.Wait(120s);
  const std::string output = launcher.Output();
  ASSERT_TRUE(test::ExitedWith(status, 0)) << test::Describe(status) << "\n" << output;
  EXPECT_TRUE(Contains(output, "rank 1 (machine 0, local rank 1, pid " + std::to_string(rank1) +
                                   ") failed first: killed by signal 9 (SIGKILL)"))
      << output;
  EXPECT_TRUE(Contains(output, "restarting the job (restart 1 of 1) with --resume")) << output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      output, match,
      std::regex("resumed from " + checkpoints + "/checkpoint-00000000([0-9]{2})\\.pt at epoch 0")))
      << output;
  EXPECT_LT(std::stoi(match[1]), 40) << "the kill came after the last step";

  for (const char* rank : {"/rank-0.bin", "/rank-1.bin"}) {
    const std::vector<char> expected = ReadBytes(straight + rank);
    ASSERT_EQ(expected.size(), 300426 * sizeof(float)) << rank;
    EXPECT_TRUE(ReadBytes(resumed + rank) == expected) << rank << " differs from the straight run";
  }
}

INSTANTIATE_TEST_SUITE_P(ConvNetWithDropout, KilledWorker,
                         ::testing::Values(RestartCase{"ScriptedFromPython", true},
                                           RestartCase{"Cpp", false}),
                         [](const ::testing::TestParamInfo<RestartCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace dpl::interop_test
