// The worker's stall watchdog (Note [Stall reports]): a call blocked past the threshold is posted
// once and withdrawn when it succeeds; a failed call's post stays; a short call posts nothing.
#include "observability/stall_monitor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "observability/stall_report.hpp"

namespace dpl::observability {
namespace {

using namespace std::chrono_literals;

class Posts {
 public:
  StallMonitor::Post Sink() {
    return [this](const std::string& text) {
      std::lock_guard<std::mutex> lock(mutex_);
      texts_.push_back(text);
      return Status::Ok();
    };
  }
  std::vector<std::string> texts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return texts_;
  }
  // Waits (at most 10 s, so a slow machine cannot fail the test) for `count` posts.
  bool WaitFor(size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (texts().size() < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> texts_;
};

TEST(StallMonitor, ABlockedCallIsPostedOnceAndWithdrawnWhenItSucceeds) {
  Posts posts;
  StallMonitor& monitor = StallMonitor::Global();
  monitor.Start(50ms, posts.Sink());
  SetCurrentStep(12);
  monitor.Begin({"allreduce", 0, 2, 1201704});
  ASSERT_TRUE(posts.WaitFor(1));
  std::this_thread::sleep_for(200ms);  // four more polls: still one post
  ASSERT_EQ(posts.texts().size(), 1u);
  const std::optional<StallPost> post = DecodeStallPost(posts.texts()[0]);
  ASSERT_TRUE(post.has_value()) << posts.texts()[0];
  EXPECT_EQ(post->step, 12);
  EXPECT_EQ(post->what, "allreduce of bucket 1 of 2 (1.15 MiB)");
  monitor.End(true);
  ASSERT_TRUE(posts.WaitFor(2));
  EXPECT_EQ(posts.texts()[1], "");
  monitor.Stop();
  SetCurrentStep(0);
}

TEST(StallMonitor, AFailedCallKeepsItsPost) {
  Posts posts;
  StallMonitor& monitor = StallMonitor::Global();
  monitor.Start(50ms, posts.Sink());
  monitor.Begin({"broadcast", -1, 0, 0});
  ASSERT_TRUE(posts.WaitFor(1));
  monitor.End(false);
  std::this_thread::sleep_for(200ms);
  monitor.Stop();
  ASSERT_EQ(posts.texts().size(), 1u);
  EXPECT_EQ(DecodeStallPost(posts.texts()[0])->what, "broadcast");
}

TEST(StallMonitor, CallsShorterThanTheThresholdAreNotPosted) {
  Posts posts;
  StallMonitor& monitor = StallMonitor::Global();
  monitor.Start(60s, posts.Sink());
  for (int i = 0; i < 100; ++i) {
    monitor.Begin({"allreduce", 0, 1, 4});
    monitor.End(true);
  }
  monitor.Stop();
  EXPECT_TRUE(posts.texts().empty());
}

TEST(StallMonitor, DoesNothingUntilStarted) {
  StallMonitor& monitor = StallMonitor::Global();
  monitor.Begin({"allreduce", 0, 1, 4});  // no watchdog: ignored
  monitor.End(true);
  monitor.Stop();  // stopping what never started is fine
}

}  // namespace
}  // namespace dpl::observability
