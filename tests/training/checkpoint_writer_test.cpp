// Note [Checkpoints that do not stop training] (training/checkpoint_writer.hpp): a checkpoint due
// while the one before is still written waits for it (one write and one copy at a time), a failed
// write comes back at the next call, and a writer destroyed mid-write stops a wait for others.
#include "training/checkpoint_writer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace dpl::training {
namespace {

using namespace std::chrono_literals;

TEST(CheckpointWriter, ACheckpointDueWhileTheOneBeforeIsWrittenWaitsForIt) {
  CheckpointWriter writer(/*says_waits=*/true);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> writes{0};
  ASSERT_TRUE(writer.WaitIdle(1).ok()) << "nothing under way";
  writer.Start(1, [&](const std::atomic<bool>&) {
    released.wait();
    ++writes;
    return Status::Ok();
  });
  std::future<Status> next = std::async(std::launch::async, [&] { return writer.WaitIdle(2); });
  EXPECT_EQ(next.wait_for(200ms), std::future_status::timeout) << "the write is under way";
  EXPECT_EQ(writes.load(), 0);
  release.set_value();
  EXPECT_TRUE(next.get().ok());
  EXPECT_EQ(writes.load(), 1);
  writer.Start(2, [&](const std::atomic<bool>&) {
    ++writes;
    return Status::Io("disk full");
  });
  const Status failed = writer.Finish();
  EXPECT_EQ(failed.message(), "disk full");
  EXPECT_EQ(writes.load(), 2);
  EXPECT_TRUE(writer.Finish().ok()) << "a failure is returned once";
}

TEST(CheckpointWriter, DestroyedMidWriteItStopsAWaitForOtherRanks) {
  std::atomic<bool> saw_stop{false};
  {
    CheckpointWriter writer(/*says_waits=*/false);
    writer.Start(7, [&](const std::atomic<bool>& stop) {
      while (!stop.load()) std::this_thread::sleep_for(1ms);  // as a wait for other ranks' parts
      saw_stop = true;
      return Status::Error("abandoned");
    });
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(saw_stop.load());
}

}  // namespace
}  // namespace dpl::training
