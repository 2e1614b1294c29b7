#include "training/checkpoint.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace dpl::training {
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
    s.optimizer_steps = step;
    s.fingerprint = "model=convnet;seed=0";
    s.parameters = {std::vector<float>(elements, 1.5f), {-1.0f, 2.0f}};
    s.optimizer_state = {std::vector<float>(elements, 0.25f), {}, {3.0f}};
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
  EXPECT_EQ(*newest, dir_ + "/checkpoint-0000000010.dplckpt");
  Result<CheckpointState> read = ReadCheckpoint(*newest);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const CheckpointState expected = Sample(10, 10);
  EXPECT_EQ(read->global_step, 10);
  EXPECT_EQ(read->epoch, 2);
  EXPECT_EQ(read->step_in_epoch, 17);
  EXPECT_EQ(read->optimizer_steps, 10);
  EXPECT_EQ(read->fingerprint, expected.fingerprint);
  EXPECT_EQ(read->parameters, expected.parameters);
  EXPECT_EQ(read->optimizer_state, expected.optimizer_state);
}

TEST_F(CheckpointTest, CorruptAndTruncatedFilesAreRefused) {
  ASSERT_TRUE(WriteCheckpoint(dir_, Sample(3, 100)).ok());
  const std::string path = dir_ + "/checkpoint-0000000003.dplckpt";
  const std::string fix = "; delete it to resume from the previous checkpoint";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  EXPECT_EQ(ReadCheckpoint(path).status().message(),
            "checkpoint " + path + " is corrupt or truncated (CRC-32 mismatch)" + fix);
  std::filesystem::resize_file(path, 150);
  EXPECT_EQ(ReadCheckpoint(path).status().message(),
            "checkpoint " + path + " is corrupt or truncated (CRC-32 mismatch)" + fix);
  std::filesystem::resize_file(path, 10);
  EXPECT_EQ(ReadCheckpoint(path).status().message(),
            "checkpoint " + path + " is truncated (10 bytes)" + fix);
  std::ofstream(path, std::ios::trunc) << "hello world, not a checkpoint";
  EXPECT_EQ(ReadCheckpoint(path).status().message(),
            "checkpoint " + path + " is not a dpl checkpoint (bad magic)" + fix);
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
  Result<CheckpointState> first = ReadCheckpoint(dir_ + "/checkpoint-0000000001.dplckpt");
  ASSERT_TRUE(first.ok()) << first.status().message();
}

}  // namespace
}  // namespace dpl::training
