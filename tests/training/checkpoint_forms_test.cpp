// Note [Checkpoint forms] (training/checkpoint_folder.hpp) through the launcher: the MLP on two
// workers writes the checkpoint of step 4 as a folder of parts (--shard-optimizer on) and as the
// one file (off). Python's torch.load(weights_only=True) finds the same values in both; each
// resumes bit-identical to a straight run; and at another world size the folder resumes exactly as
// the one file does.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "launcher_runs.hpp"
#include "torch_reference.hpp"
#include "training/checkpoint.hpp"
#include "training/checkpoint_folder.hpp"

namespace dpl::test {
namespace {

class CheckpointFormsTest : public LauncherRunTest {
 protected:
  void SetUp() override { WriteData(480); }

  // The MLP with Adam on the test's data, parameters dumped into folder `name`.
  std::string Job(int processes, const std::string& name, const std::string& extra) {
    return Data() +
           "--model mlp --backend gloo --no-eval --batch-size 48 --optimizer adam --lr 0.01 "
           "--num-processes " +
           std::to_string(processes) + " --dump-parameters " + Folder(name) + " " + extra;
  }
  std::vector<float> Params(const std::string& name) const {
    return ReadFloats(dir_ + "/" + name + "/rank-0.bin");
  }
  void ExpectRun(const std::string& arguments) {
    const RunResult r = RunLauncher(arguments);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // The checkpoint of step 4 in both forms, in folders "parts" and "file" of `copy`.
  void WriteBothForms(const std::string& copy) {
    ExpectRun(
        Job(2, copy + "-p",
            "--max-steps 4 --shard-optimizer on --checkpoint-dir " + Folder(copy + "/parts")));
    ExpectRun(
        Job(2, copy + "-f",
            "--max-steps 4 --shard-optimizer off --checkpoint-dir " + Folder(copy + "/file")));
  }
};

TEST_F(CheckpointFormsTest, BothFormsHoldTheSameValuesAndResumeBitIdentically) {
  ASSERT_NO_FATAL_FAILURE(WriteBothForms("a"));
  const std::string folder = dir_ + "/a/parts/" + training::CheckpointFolderName(4);
  EXPECT_TRUE(training::IsCompleteCheckpointFolder(folder));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/a/parts/" + training::StagingFolderName(4)));
  ASSERT_NO_FATAL_FAILURE(ExpectRun(Job(2, "straight", "--max-steps 8")));
  const RunResult parts = RunLauncher(Job(2, "parts",
                                          "--max-steps 8 --shard-optimizer on "
                                          "--resume --checkpoint-dir " +
                                              dir_ + "/a/parts"));
  ASSERT_EQ(parts.exit_code, 0) << parts.output;
  EXPECT_TRUE(Contains(parts.output, "resumed from " + folder + " at epoch")) << parts.output;
  ASSERT_NO_FATAL_FAILURE(ExpectRun(Job(2, "file",
                                        "--max-steps 8 --shard-optimizer off "
                                        "--resume --checkpoint-dir " +
                                            dir_ + "/a/file")));
  ASSERT_GT(Params("straight").size(), 1000u);
  EXPECT_TRUE(Params("parts") == Params("straight")) << "the folder, resumed";
  EXPECT_TRUE(Params("file") == Params("straight")) << "the one file, resumed";
  DPL_RUN_TORCH_REFERENCE("checkpoint_folder_reference.py",
                          folder + " " + dir_ + "/a/file/checkpoint-0000000004.pt");
}

TEST_F(CheckpointFormsTest, AtAnotherWorldSizeTheFolderResumesAsTheOneFileDoes) {
  for (const int processes : {3, 1}) {
    const std::string at = std::to_string(processes);
    // A copy of each: the resumed run writes its own checkpoints there.
    ASSERT_NO_FATAL_FAILURE(WriteBothForms("b" + at));
    const std::string sharding = processes > 1 ? "on" : "off";
    for (const std::string form : {"parts", "file"}) {
      const RunResult resumed =
          RunLauncher(Job(processes, form + at,
                          "--max-steps 8 --resume --shard-optimizer " + sharding +
                              " --checkpoint-dir " + dir_ + "/b" + at + "/" + form));
      ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
      EXPECT_TRUE(Contains(resumed.output, "(step 4)")) << resumed.output;
    }
    ASSERT_GT(Params("file" + at).size(), 1000u);
    EXPECT_TRUE(Params("parts" + at) == Params("file" + at)) << processes << " workers";
  }
}

// Note [A fresh run and an earlier run's checkpoints] (training/checkpoint_policy.cpp): a run
// without --resume into a folder of checkpoints, of either form, is refused before it writes one,
// and the earlier run's checkpoints stay as they were.
TEST_F(CheckpointFormsTest, AFreshRunRefusesAnEarlierRunsCheckpointsAndLeavesThemAsTheyWere) {
  ASSERT_NO_FATAL_FAILURE(WriteBothForms("c"));
  const std::string file = dir_ + "/c/file/" + training::CheckpointFileName(4);
  const auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = bytes(file);
  ASSERT_GT(before.size(), 1000u);
  for (const std::string form : {"parts", "file"}) {
    const RunResult fresh =
        RunLauncher(Job(2, "fresh-" + form,
                        "--max-steps 2 --checkpoint-every 1 --shard-optimizer " +
                            std::string(form == "parts" ? "on" : "off") + " --checkpoint-dir " +
                            dir_ + "/c/" + form));
    EXPECT_NE(fresh.exit_code, 0) << fresh.output;
    EXPECT_TRUE(Contains(fresh.output, "--checkpoint-dir " + dir_ + "/c/" + form +
                                           " already holds the checkpoints of a run"))
        << fresh.output;
    EXPECT_TRUE(Contains(fresh.output, "add --resume to go on from it, or name an empty folder"))
        << fresh.output;
  }
  EXPECT_TRUE(bytes(file) == before) << "the earlier run's checkpoint was rewritten";
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/c/file/" + training::CheckpointFileName(1)));
  EXPECT_TRUE(
      training::IsCompleteCheckpointFolder(dir_ + "/c/parts/" + training::CheckpointFolderName(4)));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/c/parts/" + training::CheckpointFolderName(1)));
}

}  // namespace
}  // namespace dpl::test
