#include "training/checkpoint.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dpl/torch_files/torch_archive.hpp"
#include "torch_reference.hpp"

namespace dpl::training {

using torch_files::TorchTensor;
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-ckpt-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static CheckpointState Sample(int64_t step, size_t elements) {
    CheckpointState s;
    s.global_step = step;
    s.epoch = 2;
    s.step_in_epoch = 17;
    s.optimizer_name = "adadelta";
    s.optimizer_steps = step;
    s.options = {{"--model", "convnet"}, {"--seed", "0"}};
    s.model = {{"fc.weight",
                TorchTensor::Of<float>({int64_t(elements)}, std::vector<float>(elements, 1.5f))},
               {"fc.bias", TorchTensor::Of<float>({2}, {-1.0f, 2.0f})},
               {"bn.num_batches_tracked", TorchTensor::Of<int64_t>({}, {7})}};
    s.optimizer_state = {
        {"fc.weight", "square_avg",
         TorchTensor::Of<float>({int64_t(elements)}, std::vector<float>(elements, 0.25f))},
        {"fc.bias", "square_avg", TorchTensor::Of<float>({2}, {3.0f, 4.0f})}};
    s.rng_state = {1, 2, 3, 250};
    s.scaler = ScalerCheckpoint{32768.0, 2.0, 0.5, 2000, 11, 3};
    return s;
  }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsAndFindsTheNewest) {
  Result<std::string> none = NewestCheckpoint(dir_ + "/absent");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(9, 10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(10, 10)).ok());
  Result<std::string> newest = NewestCheckpoint(dir_);
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(*newest, dir_ + "/checkpoint-0000000010.pt");
  Result<CheckpointState> read = ReadCheckpoint(*newest);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const CheckpointState expected = Sample(10, 10);
  EXPECT_EQ(read->global_step, 10);
  EXPECT_EQ(read->epoch, 2);
  EXPECT_EQ(read->step_in_epoch, 17);
  EXPECT_EQ(read->optimizer_name, "adadelta");
  EXPECT_EQ(read->optimizer_steps, 10);
  EXPECT_EQ(read->options, expected.options);
  ASSERT_EQ(read->model.size(), expected.model.size());
  for (size_t i = 0; i < expected.model.size(); ++i) {
    EXPECT_EQ(read->model[i].name, expected.model[i].name);
    EXPECT_EQ(read->model[i].tensor, expected.model[i].tensor) << expected.model[i].name;
  }
  ASSERT_EQ(read->optimizer_state.size(), expected.optimizer_state.size());
  for (size_t i = 0; i < expected.optimizer_state.size(); ++i) {
    EXPECT_EQ(read->optimizer_state[i].parameter, expected.optimizer_state[i].parameter);
    EXPECT_EQ(read->optimizer_state[i].state, expected.optimizer_state[i].state);
    EXPECT_EQ(read->optimizer_state[i].tensor, expected.optimizer_state[i].tensor);
  }
  EXPECT_EQ(read->rng_state, expected.rng_state);
  ASSERT_TRUE(read->scaler.has_value());
  EXPECT_EQ(read->scaler->scale, 32768.0);
  EXPECT_EQ(read->scaler->growth_factor, 2.0);
  EXPECT_EQ(read->scaler->backoff_factor, 0.5);
  EXPECT_EQ(read->scaler->growth_interval, 2000);
  EXPECT_EQ(read->scaler->growth_tracker, 11);
  EXPECT_EQ(read->scaler->skipped_steps, 3);
  // A run without a loss scaler writes "scaler": {} and reads back none.
  CheckpointState unscaled = Sample(11, 2);
  unscaled.scaler.reset();
  ASSERT_TRUE(WriteCheckpoint(dir_, unscaled).ok());
  Result<CheckpointState> read_unscaled = ReadCheckpoint(dir_ + "/checkpoint-0000000011.pt");
  ASSERT_TRUE(read_unscaled.ok()) << read_unscaled.status().message();
  EXPECT_FALSE(read_unscaled->scaler.has_value());
}

// Version 2 (before the loss scaler) is still read; a version from the future is refused.
TEST_F(CheckpointTest, ReadsVersionTwoAndRefusesNewerVersions) {
  using torch_files::TorchValue;
  for (const int64_t version : {int64_t(2), int64_t(4)}) {
    const TorchValue root = TorchValue::Dict(
        {{"format", TorchValue::String("dpl-checkpoint")},
         {"version", TorchValue::Int(version)},
         {"position", TorchValue::Dict({{"epoch", TorchValue::Int(1)},
                                        {"step_in_epoch", TorchValue::Int(5)},
                                        {"global_step", TorchValue::Int(25)}})},
         {"model", TorchValue::OrderedDict({{"fc.bias", TorchValue::Tensor(TorchTensor::Of<float>(
                                                            {2}, {1.0f, 2.0f}))}})},
         {"optimizer", TorchValue::Dict({{"name", TorchValue::String("sgd")},
                                         {"steps", TorchValue::Int(25)},
                                         {"state", TorchValue::Dict()}})},
         {"rng", TorchValue::Tensor(TorchTensor::Of<uint8_t>({0}, {}))},
         {"options", TorchValue::Dict({{"--model", TorchValue::String("mlp")}})}});
    const std::string path = dir_ + "/v" + std::to_string(version) + ".pt";
    ASSERT_TRUE(torch_files::WriteTorchArchive(path, root, "checkpoint").ok());
    Result<CheckpointState> read = ReadCheckpoint(path);
    if (version == 2) {
      ASSERT_TRUE(read.ok()) << read.status().message();
      EXPECT_EQ(read->global_step, 25);
      EXPECT_EQ(read->optimizer_name, "sgd");
      EXPECT_FALSE(read->scaler.has_value());
    } else {
      ASSERT_FALSE(read.ok());
      EXPECT_EQ(read.status().message(), "checkpoint " + path +
                                             " has format version 4 but this launcher reads "
                                             "versions 2 to 3");
    }
  }
}

// What the checkpoint holds is named, for Python's torch.load.
TEST_F(CheckpointTest, PythonReadsTheCheckpointAsADict) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(4, 3)).ok());
  DPL_RUN_TORCH_REFERENCE("checkpoint_reference.py", dir_ + "/checkpoint-0000000004.pt");
}

TEST_F(CheckpointTest, CorruptTruncatedAndOldFilesAreRefused) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(3, 100)).ok());
  const std::string path = dir_ + "/checkpoint-0000000003.pt";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  Result<CheckpointState> flipped = ReadCheckpoint(path);
  ASSERT_FALSE(flipped.ok());
  EXPECT_EQ(flipped.status().message().rfind("reading checkpoint " + path + ": ", 0), 0u)
      << flipped.status().message();
  std::filesystem::resize_file(path, 150);
  EXPECT_FALSE(ReadCheckpoint(path).ok());
  std::ofstream(path, std::ios::trunc) << "hello world, not a checkpoint";
  EXPECT_FALSE(ReadCheckpoint(path).ok());
  // The format before checkpoints were torch files: refused with what to do, also when it is the
  // newest file of the folder.
  const std::string old = dir_ + "/checkpoint-0000000005.dplckpt";
  std::ofstream(old, std::ios::binary) << "DPLCKPT1 and the rest";
  const std::string refusal =
      "checkpoint " + old +
      " is in dpl's old checkpoint format (DPLCKPT1), which this launcher no longer reads; "
      "resume it with the dpl version that wrote it, or start afresh with another "
      "--checkpoint-dir (checkpoints are now torch.save files Python can load)";
  EXPECT_EQ(ReadCheckpoint(old).status().message(), refusal);
  EXPECT_EQ(NewestCheckpoint(dir_).status().message(), refusal);
}

// A writer killed mid-write leaves the previous checkpoint intact and the newest still readable.
TEST_F(CheckpointTest, KillDuringWriteKeepsThePreviousOne) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(1, 1000)).ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Rewrites big checkpoints of steps 1 and 2 until killed.
    for (int64_t i = 0;; ++i) (void)WriteCheckpoint(dir_, Sample(1 + i % 2, 8 << 20));
  }
  ::usleep(300 * 1000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  Result<std::string> newest = NewestCheckpoint(dir_);
  ASSERT_TRUE(newest.ok());
  Result<CheckpointState> read = ReadCheckpoint(*newest);
  ASSERT_TRUE(read.ok()) << read.status().message();
  Result<CheckpointState> first = ReadCheckpoint(dir_ + "/checkpoint-0000000001.pt");
  ASSERT_TRUE(first.ok()) << first.status().message();
}

// Note [Checkpoint retention]: after step 6 is complete, keep 2 leaves 5 and 6, removes 1 to 4
// and the temporary a killed write of step 3 left, and leaves a later run's step 9 and a write of
// step 7 alone.
TEST_F(CheckpointTest, RetentionKeepsTheNewestAndRemovesLeftovers) {
  for (int64_t step = 1; step <= 6; ++step)
    ASSERT_TRUE(WriteCheckpoint(dir_, Sample(step, 10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(9, 10)).ok());
  for (const char* leftover :
       {"/checkpoint-0000000003.pt.tmp.4242", "/checkpoint-0000000007.pt.tmp.77"}) {
    std::ofstream(dir_ + leftover) << "partial";
  }
  std::ofstream(dir_ + "/notes.txt") << "not a checkpoint";
  std::ofstream(dir_ + "/checkpoint-0000000002.pt.bak") << "not ours either";

  Result<std::vector<CheckpointFile>> listed = ListCheckpointFiles(dir_);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 9u);
  EXPECT_EQ((*listed)[3].step, 3);
  EXPECT_TRUE((*listed)[3].temporary);
  EXPECT_EQ((*listed)[3].path, dir_ + "/checkpoint-0000000003.pt.tmp.4242");

  Result<std::vector<std::string>> none = RemoveOlderCheckpoints(dir_, 6, 0);
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->empty()) << "keep 0 keeps every checkpoint";

  Result<std::vector<std::string>> removed = RemoveOlderCheckpoints(dir_, 6, 2);
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  const std::vector<std::string> expected_removed = {
      dir_ + "/checkpoint-0000000004.pt", dir_ + "/checkpoint-0000000003.pt.tmp.4242",
      dir_ + "/checkpoint-0000000003.pt", dir_ + "/checkpoint-0000000002.pt",
      dir_ + "/checkpoint-0000000001.pt"};
  EXPECT_EQ(*removed, expected_removed);
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  const std::vector<std::string> expected_left = {
      "checkpoint-0000000002.pt.bak",    "checkpoint-0000000005.pt", "checkpoint-0000000006.pt",
      "checkpoint-0000000007.pt.tmp.77", "checkpoint-0000000009.pt", "notes.txt"};
  EXPECT_EQ(left, expected_left);
  ASSERT_TRUE(ReadCheckpoint(dir_ + "/checkpoint-0000000005.pt").ok());

  // keep 1: the newest alone.
  Result<std::vector<std::string>> last = RemoveOlderCheckpoints(dir_, 6, 1);
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(*last, std::vector<std::string>{dir_ + "/checkpoint-0000000005.pt"});
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/checkpoint-0000000006.pt"));
}

TEST_F(CheckpointTest, RetentionOfAFolderItCannotChangeSaysWhichFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root removes files from read-only folders";
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(1, 10)).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(2, 10)).ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  Result<std::vector<std::string>> removed = RemoveOlderCheckpoints(dir_, 2, 1);
  ::chmod(dir_.c_str(), 0755);
  EXPECT_EQ(removed.status().message(), "removing the old checkpoint " + dir_ +
                                            "/checkpoint-0000000001.pt failed: Permission denied");
}

}  // namespace
}  // namespace dpl::training
