// Every sample once per epoch across changes of the world size (Note [Global sample position] in
// launcher/training/sampler.hpp): an elastic job of three launchers on loopback, each in a process
// group of its own, shrinks to two machines when one is killed and grows back to three, all
// inside one epoch, its workers regrouping in place (Note [Shrink in place]). The test model
// (tests/datasets/sample_recorder.c) writes down each step's samples per attempt and rank; the
// data are WebDataset shards whose images spell their index. A step counts as committed when no
// later attempt computed it again (each attempt continues from the newest step a worker
// committed: the step in flight is computed again), and the committed steps of the epoch must
// hold every sample exactly once.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "elastic_jobs.hpp"
#include "support/shell_capture.hpp"

namespace dpl::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kSamples = 960;  // 80 global batches of 12: 4 a rank on three machines, 6 on two
constexpr int kGlobalBatch = 12;

// Attempt -> rank -> that rank's lines (one a step, its sample indices) from `folder`.
using Records = std::map<int, std::map<int, std::vector<std::string>>>;

Records ReadRecords(const std::string& folder) {
  Records records;
  const std::regex name("attempt-([0-9]+)-rank-([0-9]+)\\.txt");
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::smatch match;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, match, name)) continue;
    std::ifstream in(entry.path());
    auto& lines = records[std::stoi(match[1])][std::stoi(match[2])];
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  return records;
}

// The global step each attempt after the first resumed from, in order (rank 0's lines; not the
// indented ones that quote a failed worker's last lines).
std::vector<int> ResumedSteps(const std::string& output) {
  std::vector<int> steps;
  // A restart resumes from a checkpoint; a regroup in place continues from a live rank's state.
  const std::regex resumed(
      "^\\S+ \\[rank 0\\] (?:resumed from .* \\(step |continuing from step )([0-9]+).*$");
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_match(line, match, resumed)) steps.push_back(std::stoi(match[1]));
  }
  return steps;
}

// The samples of the committed steps: attempt a trains steps starts[a] + 1, ...; those up to the
// next attempt's start are committed, the rest were computed again by it. `committed_steps`
// counts them.
std::multiset<int> CommittedSamples(const Records& seen, const std::vector<int>& starts,
                                    int* committed_steps) {
  std::multiset<int> epoch;
  size_t a = 0;
  for (const auto& [attempt, ranks] : seen) {
    const int last = a + 1 < starts.size() ? starts[a + 1] : kSamples / kGlobalBatch;
    for (const auto& [rank, lines] : ranks) {
      EXPECT_GE(int(lines.size()), last - starts[a]) << "attempt " << attempt << " rank " << rank;
      for (int k = 0; k < last - starts[a] && k < int(lines.size()); ++k) {
        std::istringstream indices(lines[size_t(k)]);
        for (int index; indices >> index;) epoch.insert(index);
      }
    }
    *committed_steps += last - starts[a];
    ++a;
  }
  return epoch;
}

class ElasticSamplesTest : public ElasticJobTest {
 protected:
  // The tcp and gloo backends, the webdataset data set and the recorder, nothing that loads
  // libtorch (most of a second of every attempt's start).
  std::string RecorderPluginDir() const {
    const std::string built = DPL_TEST_PLUGIN_DIR;
    return PluginFolder(
        "recorder-plugins",
        {built + "/libdpl_backend_tcp.so", built + "/libdpl_backend_gloo.so",
         built + "/libdpl_dataset_webdataset.so",
         std::string(DPL_TEST_RECORDER_DIR) + "/libdpl_test_model_sample_recorder.so"});
  }

  // One epoch of kSamples samples, steps of at least 40 ms, a checkpoint every 5 steps.
  Args SampleJob(const std::string& records) {
    const std::string shards = dir_ + "/shards";
    dpl::testing::RunPythonScript(DPL_TEST_SOURCE_DIR "/tests/datasets/shard_writer.py",
                                  "indexed " + shards + " 400:200:360");
    return {"--plugin-dir",
            RecorderPluginDir(),
            "--model",
            "sample_recorder",
            "--model-options",
            "dir=" + records + ",step_ms=40,by_attempt=1",
            "--data",
            "webdataset",
            "--data-dir",
            shards,
            "--data-cache",
            dir_ + "/cache",
            "--backend",
            "gloo",
            "--num-processes",
            "1",
            "--threads-per-worker",
            "1",
            "--batch-size",
            std::to_string(kGlobalBatch),
            "--epochs",
            "1",
            "--seed",
            "7",
            "--no-eval",
            "--no-progress",
            "--num-machines",
            "2:3",
            "--master-port",
            std::to_string(FreePort()),
            "--max-restarts",
            "5",
            "--checkpoint-dir",
            dir_ + "/checkpoints",
            "--checkpoint-every",
            "5",
            "--join-grace",
            "1",
            "--rendezvous-timeout",
            "60"};
  }
};

// Waits until `rank` of `attempt` wrote `steps` lines into `records`, at most 60 s.
bool WaitForSteps(const std::string& records, int attempt, int rank, size_t steps) {
  const std::string path =
      records + "/attempt-" + std::to_string(attempt) + "-rank-" + std::to_string(rank) + ".txt";
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    size_t lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    if (lines >= steps) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

TEST_F(ElasticSamplesTest, AShrinkAndAGrowInOneEpochSeeEverySampleOnce) {
  const std::string records = dir_ + "/records";
  fs::create_directories(records);
  const Args args = SampleJob(records);
  for (int i = 0; i < 3; ++i) Start(args);
  LauncherProcess* machine0 = MachineZero();
  ASSERT_NE(machine0, nullptr);
  ASSERT_TRUE(WaitForSteps(records, 0, 0, 17)) << machine0->Output();

  // Shrink: the machine of rank 2 killed, none in its place: attempt 1 runs on two.
  LauncherProcess* first_victim = LauncherOfRank(2, 10s);
  ASSERT_NE(first_victim, nullptr);
  ASSERT_NE(first_victim, machine0);
  ASSERT_EQ(kill(-first_victim->pid(), SIGKILL), 0);
  first_victim->Wait(5s);
  ASSERT_TRUE(WaitForSteps(records, 1, 0, 13)) << machine0->Output();

  // Grow: two new machines wait for the next attempt, which the loss of rank 1's machine starts;
  // attempt 2 runs on three again.
  Start(args);
  Start(args);
  std::this_thread::sleep_for(1s);  // both have joined the store and wait for an attempt
  LauncherProcess* second_victim = LauncherOfRank(1, 10s);
  ASSERT_NE(second_victim, nullptr);
  ASSERT_NE(second_victim, machine0);
  ASSERT_EQ(kill(-second_victim->pid(), SIGKILL), 0);
  second_victim->Wait(5s);

  for (auto& launcher : launchers_) {
    if (launcher.get() == first_victim || launcher.get() == second_victim) continue;
    const auto status = launcher->Wait(120s);
    ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher->Output();
  }
  const std::string output = machine0->Output();
  const Records seen = ReadRecords(records);
  const std::vector<int> resumed = ResumedSteps(output);
  // Three attempts when the machines change by restarts (3, 2, 3 machines); in place the new
  // machines also join the running job by a regroup of their own (3, 2, 3, 3).
  ASSERT_GE(seen.size(), 3u) << "attempts recorded\n" << output;
  ASSERT_EQ(resumed.size(), seen.size() - 1) << output;
  std::vector<size_t> world_sizes;
  for (const auto& [attempt, ranks] : seen) world_sizes.push_back(ranks.size());
  EXPECT_EQ(world_sizes[0], 3u) << output;
  EXPECT_EQ(world_sizes[1], 2u) << output;
  EXPECT_EQ(world_sizes.back(), 3u) << output;

  std::vector<int> starts = {0};
  starts.insert(starts.end(), resumed.begin(), resumed.end());
  int committed_steps = 0;
  const std::multiset<int> epoch = CommittedSamples(seen, starts, &committed_steps);
  EXPECT_EQ(committed_steps, kSamples / kGlobalBatch);
  EXPECT_EQ(epoch.size(), size_t(kSamples)) << "samples in the committed steps";
  EXPECT_EQ(std::set<int>(epoch.begin(), epoch.end()).size(), size_t(kSamples))
      << "distinct samples in the committed steps";
  EXPECT_EQ(*epoch.begin(), 0);
  EXPECT_EQ(*epoch.rbegin(), kSamples - 1);
}

}  // namespace
}  // namespace dpl::test
