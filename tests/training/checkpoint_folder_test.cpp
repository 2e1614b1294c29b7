// Note [Checkpoint forms] (training/checkpoint_folder.hpp): a folder of parts, written as the ranks
// write it, reads back as the one file of the same state (here and in Python's torch.load); parts
// that are missing, overlap or leave elements out are refused naming them; the retention and the
// start of a run remove folders as they remove files.
#include "training/checkpoint_folder.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "torch_reference.hpp"
#include "training/checkpoint.hpp"

namespace dpl::training {

using torch_files::TorchTensor;
namespace {

namespace fs = std::filesystem;

std::vector<float> Range(size_t count, float first) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = first + float(i);
  return values;
}

TorchTensor Floats(const std::vector<float>& values) {
  return TorchTensor::Of<float>({int64_t(values.size())}, values);
}

// A state whose optimizer keeps two tensors a parameter: fc.weight (2 x 5) and fc.bias (2).
CheckpointState Whole(int64_t step) {
  CheckpointState s;
  s.global_step = step;
  s.epoch = 1;
  s.step_in_epoch = 3;
  s.optimizer_name = "adam";
  s.optimizer_steps = step;
  s.options = {{"--model", "mlp"}};
  s.model = {{"fc.weight", TorchTensor::Of<float>({2, 5}, Range(10, 0.5f))},
             {"fc.bias", TorchTensor::Of<float>({2}, {-1.0f, 2.0f})},
             {"bn.num_batches_tracked", TorchTensor::Of<int64_t>({}, {7})}};
  for (const char* state : {"exp_avg", "exp_avg_sq"}) {
    const float base = state[7] == '\0' ? 100.0f : 200.0f;
    s.optimizer_state.push_back(
        {"fc.weight", state, TorchTensor::Of<float>({2, 5}, Range(10, base))});
    s.optimizer_state.push_back({"fc.bias", state, TorchTensor::Of<float>({2}, Range(2, -base))});
  }
  s.rng_state = {9, 8, 7};
  return s;
}

// Elements [offset, offset + n) of `parameter`'s state in `whole` as a part's run.
OptimizerPartRun RunOf(const CheckpointState& whole, const std::string& parameter, size_t offset,
                       size_t n) {
  OptimizerPartRun run{parameter, int64_t(offset), {}};
  for (const char* state : {"exp_avg", "exp_avg_sq"}) {
    for (const OptimizerStateTensor& entry : whole.optimizer_state) {
      if (entry.parameter != parameter || entry.state != state) continue;
      const std::vector<float> values = *entry.tensor.Values<float>();
      run.state.push_back(Floats(std::vector<float>(values.begin() + std::ptrdiff_t(offset),
                                                    values.begin() + std::ptrdiff_t(offset + n))));
    }
  }
  return run;
}

// `read` holds `whole`'s optimizer state, each tensor whatever the order.
void ExpectSameOptimizerState(const CheckpointState& read, const CheckpointState& whole) {
  ASSERT_EQ(read.optimizer_state.size(), whole.optimizer_state.size());
  for (const OptimizerStateTensor& expected : whole.optimizer_state) {
    const auto found = std::find_if(
        read.optimizer_state.begin(), read.optimizer_state.end(), [&](const auto& entry) {
          return entry.parameter == expected.parameter && entry.state == expected.state;
        });
    ASSERT_NE(found, read.optimizer_state.end()) << expected.parameter << "/" << expected.state;
    EXPECT_EQ(found->tensor, expected.tensor) << expected.parameter << "/" << expected.state;
  }
}

class CheckpointFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-ckpt-folder-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The parts of two ranks: rank 0 the first 6 elements of fc.weight, rank 1 the rest and fc.bias
  // (`overlap` moves rank 1's start one back; `gap` one on).
  Status WriteParts(int64_t step, int overlap = 0) {
    const CheckpointState whole = Whole(step);
    OptimizerPart zero{step, 0, 2, {"exp_avg", "exp_avg_sq"}, {RunOf(whole, "fc.weight", 0, 6)}};
    const size_t start = size_t(6 - overlap);
    OptimizerPart one{
        step,
        1,
        2,
        {"exp_avg", "exp_avg_sq"},
        {RunOf(whole, "fc.weight", start, 10 - start), RunOf(whole, "fc.bias", 0, 2)}};
    DPL_RETURN_IF_ERROR(WriteOptimizerPart(dir_, std::move(zero)));
    return WriteOptimizerPart(dir_, std::move(one));
  }
  Status WriteFolder(int64_t step, int overlap = 0) {
    DPL_RETURN_IF_ERROR(WriteParts(step, overlap));
    CheckpointState state = Whole(step);
    state.optimizer_state.clear();
    DPL_RETURN_IF_ERROR(WriteFolderState(dir_, std::move(state)));
    std::atomic<bool> stop{false};
    return CommitCheckpointFolder(dir_, step, 2, stop);
  }
  std::string dir_;
};

std::vector<std::string> Names(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(CheckpointFolderTest, AFolderReadsBackAsTheOneFileOfTheSameState) {
  ASSERT_TRUE(WriteFolder(7).ok());
  const std::string folder = dir_ + "/checkpoint-0000000007";
  EXPECT_EQ(Names(dir_), std::vector<std::string>{"checkpoint-0000000007"}) << "no staging left";
  EXPECT_EQ(Names(folder), (std::vector<std::string>{"manifest.pt", "optimizer-00000-of-00002.pt",
                                                     "optimizer-00001-of-00002.pt", "state.pt"}));
  Result<std::string> newest = NewestCheckpoint(dir_);
  ASSERT_TRUE(newest.ok()) << newest.status().message();
  EXPECT_EQ(*newest, folder);
  Result<CheckpointState> read = ReadCheckpoint(folder);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const CheckpointState whole = Whole(7);
  EXPECT_EQ(read->global_step, 7);
  EXPECT_EQ(read->step_in_epoch, 3);
  EXPECT_EQ(read->options, whole.options);
  EXPECT_EQ(read->rng_state, whole.rng_state);
  ASSERT_EQ(read->model.size(), whole.model.size());
  for (size_t i = 0; i < whole.model.size(); ++i) {
    EXPECT_EQ(read->model[i].tensor, whole.model[i].tensor) << whole.model[i].name;
  }
  ExpectSameOptimizerState(*read, whole);
  const std::string file = dir_ + "/whole";
  ASSERT_TRUE(WriteCheckpoint(file, Whole(7)).ok());
  DPL_RUN_TORCH_REFERENCE("checkpoint_folder_reference.py",
                          folder + " " + file + "/checkpoint-0000000007.pt");
}

TEST_F(CheckpointFolderTest, PartsMissingOverlappingOrShortAreRefusedNamingThem) {
  // Rank 1 never writes its part: a run that ends stops the wait, and nothing is a checkpoint.
  const CheckpointState whole = Whole(3);
  ASSERT_TRUE(
      WriteOptimizerPart(dir_, {3, 0, 2, {"exp_avg"}, {RunOf(whole, "fc.weight", 0, 6)}}).ok());
  std::atomic<bool> stop{true};
  const Status abandoned = CommitCheckpointFolder(dir_, 3, 2, stop);
  EXPECT_EQ(abandoned.message(),
            "the checkpoint in " + dir_ +
                "/checkpoint-0000000003.tmp was abandoned: the run ended first");
  EXPECT_EQ(*NewestCheckpoint(dir_), "");

  ASSERT_TRUE(WriteFolder(4, /*overlap=*/1).ok());
  Result<CheckpointState> overlapping = ReadCheckpoint(dir_ + "/checkpoint-0000000004");
  EXPECT_EQ(overlapping.status().message(),
            "checkpoint " + dir_ +
                "/checkpoint-0000000004/optimizer-00001-of-00002.pt gives element 5 of 'fc.weight' "
                "that another run gave already; it was not written by dpl, or is damaged");
  ASSERT_TRUE(WriteFolder(5, /*overlap=*/-1).ok());
  Result<CheckpointState> short_of_one = ReadCheckpoint(dir_ + "/checkpoint-0000000005");
  EXPECT_EQ(short_of_one.status().message(),
            "checkpoint " + dir_ +
                "/checkpoint-0000000005 has no optimizer state for element 6 of 'fc.weight' in any "
                "part; it was not written by dpl, or is damaged");
  ASSERT_TRUE(WriteFolder(6).ok());
  const std::string part = dir_ + "/checkpoint-0000000006/optimizer-00001-of-00002.pt";
  fs::remove(part);
  Result<CheckpointState> missing = ReadCheckpoint(dir_ + "/checkpoint-0000000006");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message().rfind("reading checkpoint part " + part + ": ", 0), 0u)
      << missing.status().message();
}

// --shard-optimizer on with the shared-memory sums across machines: the parts are cut among a
// machine's workers, so ranks 0 and 2 (local rank 0 of two machines) write the same part, and
// ranks 1 and 3 the other. The repeats read back once; a repeat with other values is refused.
TEST_F(CheckpointFolderTest, PartsThatEachMachineHoldsAlikeReadBackOnce) {
  // Rank 2's exp_avg_sq of its run `changed` where not 0.
  auto write = [&](int64_t step, float changed) {
    const CheckpointState whole = Whole(step);
    for (int rank = 0; rank < 4; ++rank) {
      std::vector<OptimizerPartRun> runs = {RunOf(whole, "fc.weight", 0, 6)};
      if (rank % 2 == 1) runs = {RunOf(whole, "fc.weight", 6, 4), RunOf(whole, "fc.bias", 0, 2)};
      if (rank == 2 && changed != 0.0f) runs[0].state[1] = Floats(std::vector<float>(6, changed));
      ASSERT_TRUE(
          WriteOptimizerPart(dir_, {step, rank, 4, {"exp_avg", "exp_avg_sq"}, std::move(runs)})
              .ok());
    }
    CheckpointState state = whole;
    state.optimizer_state.clear();
    ASSERT_TRUE(WriteFolderState(dir_, std::move(state)).ok());
    std::atomic<bool> stop{false};
    ASSERT_TRUE(CommitCheckpointFolder(dir_, step, 4, stop).ok());
  };
  write(8, 0.0f);
  Result<CheckpointState> read = ReadCheckpoint(dir_ + "/checkpoint-0000000008");
  ASSERT_TRUE(read.ok()) << read.status().message();
  const CheckpointState whole = Whole(8);
  ExpectSameOptimizerState(*read, whole);
  write(9, -7.0f);
  Result<CheckpointState> differing = ReadCheckpoint(dir_ + "/checkpoint-0000000009");
  EXPECT_EQ(differing.status().message(),
            "checkpoint " + dir_ +
                "/checkpoint-0000000009/optimizer-00002-of-00004.pt gives elements 0-5 of "
                "'fc.weight' again, with other values than another part gave; it was not written "
                "by dpl, or is damaged");
}

TEST_F(CheckpointFolderTest, RetentionAndTheStartOfARunRemoveFoldersAsFiles) {
  for (int64_t step = 1; step <= 4; ++step) ASSERT_TRUE(WriteFolder(step).ok());
  ASSERT_TRUE(WriteCheckpoint(dir_, Whole(5)).ok());
  // Leftovers of writes that did not finish: steps 3 and 9.
  for (int64_t step : {3, 9}) fs::create_directories(dir_ + "/" + StagingFolderName(step));
  std::ofstream(dir_ + "/" + StagingFolderName(9) + "/optimizer-00001-of-00002.pt") << "partial";

  Result<std::vector<CheckpointFile>> listed = ListCheckpointFiles(dir_);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  ASSERT_EQ(listed->size(), 7u);
  EXPECT_TRUE((*listed)[0].folder);
  EXPECT_FALSE((*listed)[0].temporary);
  Result<std::vector<std::string>> removed = RemoveOlderCheckpoints(dir_, 5, 2);
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(Names(dir_),
            (std::vector<std::string>{"checkpoint-0000000004", "checkpoint-0000000005.pt",
                                      "checkpoint-0000000009.tmp"}));
  ASSERT_TRUE(RemoveStagingFolders(dir_).ok());
  EXPECT_EQ(Names(dir_),
            (std::vector<std::string>{"checkpoint-0000000004", "checkpoint-0000000005.pt"}));

  // One step in both forms (runs with and without --shard-optimizer on): the later written.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(WriteFolder(5).ok());
  EXPECT_EQ(*NewestCheckpoint(dir_), dir_ + "/checkpoint-0000000005");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(WriteCheckpoint(dir_, Whole(5)).ok());
  EXPECT_EQ(*NewestCheckpoint(dir_), dir_ + "/checkpoint-0000000005.pt");
}

}  // namespace
}  // namespace dpl::training
