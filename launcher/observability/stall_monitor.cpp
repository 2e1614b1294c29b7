#include "observability/stall_monitor.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "observability/stall_report.hpp"

namespace dpl::observability {
namespace {

constexpr std::chrono::milliseconds kMinPollInterval{10};
constexpr std::chrono::milliseconds kMaxPollInterval{250};

int64_t UnixMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SecondsBetween(StallMonitor::Clock::time_point from, StallMonitor::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

StallMonitor& StallMonitor::Global() {
  static StallMonitor monitor;
  return monitor;
}

StallMonitor::~StallMonitor() {
  Stop();
}

void StallMonitor::Start(std::chrono::milliseconds threshold, Post post) {
  Stop();
  std::lock_guard<std::mutex> lock(mutex_);
  threshold_ = threshold;
  post_ = std::move(post);
  stopping_ = false;
  running_ = true;
  thread_ = std::thread([this] { Watch(); });
}

void StallMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
}

void StallMonitor::Begin(const CollectiveActivity& activity) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!running_) return;
  active_ = true;
  activity_ = activity;
  step_ = CurrentStep();
  begin_ = Clock::now();
  begin_unix_ms_ = UnixMilliseconds();
  posted_ = false;
}

Status StallMonitor::Watch(const CollectiveActivity& activity,
                           const std::function<Status()>& call) {
  Begin(activity);
  const Status status = call();
  End(status.ok());
  return status;
}

void StallMonitor::End(bool ok) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_ || !active_) return;
    active_ = false;
    if (posted_ && ok) {
      withdraw_ = true;
      posted_after_s_ = SecondsBetween(begin_, Clock::now());
      completed_ = "step " + std::to_string(step_) + ": " + DescribeActivity(activity_);
      wake = true;
    }
    posted_ = false;
  }
  if (wake) wake_.notify_all();
}

void StallMonitor::PostUnlocked(std::unique_lock<std::mutex>& lock, const std::string& text) {
  const Post post = post_;
  lock.unlock();
  const Status status = post(text);
  if (!status.ok()) log::Debug("cannot post a stall report to the store: " + status.message());
  lock.lock();
}

void StallMonitor::Watch() {
  const auto poll = std::clamp(threshold_ / 5, kMinPollInterval, kMaxPollInterval);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll);
    if (stopping_) break;
    if (withdraw_) {
      withdraw_ = false;
      const std::string line = "the call in " + completed_ + " completed after " +
                               log::Duration(posted_after_s_) + "; stall report withdrawn";
      PostUnlocked(lock, "");
      log::Info(line);
    }
    if (!active_ || posted_) continue;
    const auto now = Clock::now();
    if (now - begin_ < threshold_) continue;
    posted_ = true;
    StallPost post{begin_unix_ms_, step_, DescribeActivity(activity_)};
    const std::string line = "blocked for " + log::Duration(SecondsBetween(begin_, now)) +
                             " in step " + std::to_string(step_) + ": " + post.what +
                             "; reported to the launcher";
    PostUnlocked(lock, EncodeStallPost(post));
    log::Info(line);
  }
}

}  // namespace dpl::observability
