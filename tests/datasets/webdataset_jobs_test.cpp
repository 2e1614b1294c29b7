// Training jobs of the launcher on WebDataset shards: the ConvNet on Fashion-MNIST written as
// shards by tools/make_shards.py trains bit for bit as on the idx files it came from (2 ranks,
// uneven shards), and a run resumed mid-epoch sees exactly the samples the straight run saw after
// that point, at the same world size and at others (sample_recorder.c writes them down).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/shell_capture.hpp"
#include "training/launcher_runs.hpp"

namespace {

namespace fs = std::filesystem;

using dpl::test::Contains;
using dpl::test::RunLauncher;
using dpl::test::RunResult;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class WebDatasetJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-webdataset-jobs-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string Folder(const std::string& name) const {
    fs::create_directories(dir_ + "/" + name);
    return dir_ + "/" + name;
  }
  std::string dir_;
};

// The first 1024 and 256 Fashion-MNIST images as IDX files (tests/data_jobs/write_data.py) and
// the same as shards of 300 samples (300, 300, 300, 124) by tools/make_shards.py; the ConvNet on
// 2 ranks, augmentation off, idx's normalisation passed to webdataset, 20 steps (into the second
// epoch): the same losses, the same test result and the same parameters, bit for bit.
TEST_F(WebDatasetJobTest, FashionMnistAsShardsTrainsBitIdenticalToIdx) {
  if (!fs::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kFashionMnist << " is missing (Debian's dataset-fashion-mnist)";
  }
  const std::string idx = Folder("idx"), npy = Folder("npy"), shards = Folder("shards");
  dpl::testing::RunPythonScript(
      DPL_TEST_SOURCE_DIR "/tests/data_jobs/write_data.py",
      std::string("idx-and-npy ") + kFashionMnist + " " + idx + " " + npy + " 1024 256");
  dpl::testing::RunPythonScript(DPL_TEST_SOURCE_DIR "/tools/make_shards.py",
                                idx + " " + shards + " --format idx --samples-per-shard 300");
  ASSERT_EQ(std::distance(fs::directory_iterator(shards + "/train"), fs::directory_iterator()), 4);
  struct Trained {
    std::string output;
    std::vector<double> losses;
    std::string parameters;
  };
  auto train = [&](const std::string& name, const std::string& data) {
    const std::string metrics = dir_ + "/" + name + ".jsonl", dump = Folder(name);
    const RunResult job = RunLauncher(
        "--data-cache " + Folder("cache") +
        " --seed 7 --model convnet --num-processes 2 --batch-size 64 --epochs 2 --max-steps 20 "
        "--log-interval 1 --metrics " +
        metrics + " --dump-parameters " + dump + " " + data);
    EXPECT_EQ(job.exit_code, 0) << job.output;
    return Trained{job.output, dpl::test::StepMetric(metrics, "loss"),
                   ReadText(dump + "/rank-1.bin")};
  };
  const Trained through_idx = train("idx", "--data idx --data-dir " + idx);
  const Trained through_shards = train("shards", "--data webdataset --data-dir " + shards +
                                                     " --data-options mean=0.1302,std=0.3069");
  ASSERT_EQ(through_idx.losses.size(), 20u) << through_idx.output;
  EXPECT_EQ(through_idx.losses, through_shards.losses);
  ASSERT_EQ(through_idx.parameters.size(), 300426u * sizeof(float));
  EXPECT_TRUE(through_idx.parameters == through_shards.parameters);
  EXPECT_TRUE(Contains(through_shards.output, "1024 samples in 4 shards")) << through_shards.output;
  const std::string test_line = "test set: average loss: ";
  ASSERT_TRUE(Contains(through_idx.output, test_line));
  const size_t at = through_idx.output.find(test_line);
  const std::string result = through_idx.output.substr(at, through_idx.output.find('\n', at) - at);
  EXPECT_TRUE(Contains(through_shards.output, result)) << result << "\n" << through_shards.output;
}

// The samples each training step saw, per rank: rank -> one line of indices per step.
std::map<int, std::vector<std::string>> RecordedSteps(const std::string& folder) {
  std::map<int, std::vector<std::string>> steps;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::vector<std::string>& lines = steps[std::stoi(name.substr(5))];
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  return steps;
}

// The samples of global step s (from 0) over every rank, from step `first` on.
std::vector<std::multiset<int>> GlobalSteps(const std::map<int, std::vector<std::string>>& ranks,
                                            size_t first) {
  std::vector<std::multiset<int>> steps;
  for (const auto& [rank, lines] : ranks) {
    for (size_t s = first; s < lines.size(); ++s) {
      if (steps.size() <= s - first) steps.resize(s - first + 1);
      std::istringstream indices(lines[s]);
      for (int index; indices >> index;) steps[s - first].insert(index);
    }
  }
  return steps;
}

// 96 samples in shards of 40, 7 and 49, a global batch of 12 (8 steps an epoch), 2 epochs. The
// straight run on 2 ranks against runs stopped at step 5 (inside epoch 0, a checkpoint there) and
// resumed on 2, 3 and 1 ranks: from step 6 on every global step holds the same samples, and at
// the same world size every rank the same ones in the same order.
TEST_F(WebDatasetJobTest, AResumedRunSeesTheStraightRunsSamplesAtAnyWorldSize) {
  const std::string shards = Folder("shards");
  dpl::testing::RunPythonScript(DPL_TEST_SOURCE_DIR "/tests/datasets/shard_writer.py",
                                "indexed " + shards + " 40:7:49");
  // Every run records into one folder (a resumed run must have its checkpoint's model options),
  // moved to the run's own folder afterwards.
  const std::string record = dir_ + "/record";
  auto job = [&](const std::string& name, int ranks, const std::string& extra) {
    fs::create_directories(record);
    const RunResult run = RunLauncher(
        "--plugin-dir " DPL_TEST_RECORDER_DIR " --model sample_recorder --model-options dir=" +
        record + " --data webdataset --data-dir " + shards + " --data-cache " + Folder("cache") +
        " --seed 7 --batch-size 12 --epochs 2 --num-processes " + std::to_string(ranks) + " " +
        extra);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    fs::rename(record, dir_ + "/" + name);
    return RecordedSteps(Folder(name));
  };
  const auto straight = job("straight", 2, "");
  ASSERT_EQ(straight.size(), 2u);
  ASSERT_EQ(straight.at(0).size(), 16u);
  const std::vector<std::multiset<int>> straight_steps = GlobalSteps(straight, 5);
  std::multiset<int> epoch;  // the first epoch covers every sample once
  for (const auto& step : GlobalSteps(straight, 0)) {
    if (epoch.size() < 96) epoch.insert(step.begin(), step.end());
  }
  EXPECT_EQ(epoch.size(), 96u);
  EXPECT_EQ(std::set<int>(epoch.begin(), epoch.end()).size(), 96u);

  const std::string stopped = Folder("checkpoints");
  job("first-five", 2, "--max-steps 5 --checkpoint-every 5 --checkpoint-dir " + stopped);
  for (const int ranks : {2, 3, 1}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const std::string checkpoints = Folder("checkpoints-" + std::to_string(ranks));
    fs::copy(stopped, checkpoints, fs::copy_options::recursive);
    const auto resumed =
        job("resumed-" + std::to_string(ranks), ranks, "--resume --checkpoint-dir " + checkpoints);
    ASSERT_EQ(resumed.size(), size_t(ranks));
    EXPECT_EQ(GlobalSteps(resumed, 0), straight_steps);
    if (ranks == 2) {
      for (const int rank : {0, 1}) {
        EXPECT_EQ(resumed.at(rank),
                  std::vector<std::string>(straight.at(rank).begin() + 5, straight.at(rank).end()));
      }
    }
  }
}

}  // namespace
