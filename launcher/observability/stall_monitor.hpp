// The worker's side of Note [Stall reports] (stall_report.hpp): a watchdog thread that posts the
// backend call the communication thread is blocked in once it has lasted --stall-warning, and
// withdraws the post when the call completes. One process-wide monitor (Global()), like the
// tracer: the communication thread calls Begin and End around every task; both are cheap and do
// nothing until Start.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.hpp"
#include "observability/activity.hpp"

namespace dpl::observability {

class StallMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  // Puts the text of a post where the launcher reads it; "" withdraws it. Called on the
  // watchdog thread only, so it may block (a store call).
  using Post = std::function<Status(const std::string& text)>;

  static StallMonitor& Global();
  ~StallMonitor();

  // Starts watching: a call blocked for `threshold` or longer is posted through `post`.
  void Start(std::chrono::milliseconds threshold, Post post);
  // Stops the watchdog (a post it made stays as it is).
  void Stop();

  // The calling thread blocks in `activity` from now on (one such thread: the communication
  // thread).
  void Begin(const CollectiveActivity& activity);
  // The call of Begin returned; `ok` when it succeeded, which withdraws a post it got. A failed
  // call's post stays: it tells the launcher what the failure ended.
  void End(bool ok);
  // Begin(activity), `call`, End with its success: a blocking call of the training thread watched
  // as the communication thread's are (while that thread is idle: one call is watched at a time).
  Status Watch(const CollectiveActivity& activity, const std::function<Status()>& call);

 private:
  void Watch();
  void PostUnlocked(std::unique_lock<std::mutex>& lock, const std::string& text);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  bool running_ = false;
  bool stopping_ = false;
  std::chrono::milliseconds threshold_{0};
  Post post_;
  // The call under way (guarded by mutex_).
  bool active_ = false;
  CollectiveActivity activity_;
  int64_t step_ = 0;
  Clock::time_point begin_;
  int64_t begin_unix_ms_ = 0;
  bool posted_ = false;          // this call's post is out
  bool withdraw_ = false;        // a completed call's post is still to be withdrawn
  double posted_after_s_ = 0.0;  // for the log line when it completes
  std::string completed_;        // what completed, for that line
};

}  // namespace dpl::observability
