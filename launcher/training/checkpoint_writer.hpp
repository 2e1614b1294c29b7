// Note [Checkpoints that do not stop training]: at a step boundary the checkpoint's state is
// copied into host memory (CheckpointPolicy::Save: the parameters, buffers, random state and the
// optimizer's state, gathered to rank 0 for the one file), which is the only time training
// waits; this writer's thread then writes the copy (the file written, fsynced and renamed, the
// folder fsynced, then the retention) while the next steps train. One write is under way at a
// time and one copy is held: when the next checkpoint is due before the write is done, training
// waits for it (rank 0 says so, with what to do), so the copies never pile up. A write's failure
// ends the run at the next checkpoint or at the end, as a failed write at the step did before.
// Preemption and the end of a run wait for the write (Finish) before the worker exits, so the
// checkpoint of that step is complete on disk.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.hpp"

namespace dpl::training {

class CheckpointWriter {
 public:
  // A write: given `stop`, which is set when the writer is destroyed before the write is done
  // (the run failed); a write that waits for other ranks then gives up.
  using Write = std::function<Status(const std::atomic<bool>& stop)>;

  // `says_waits`: this rank logs when training waits for a write (rank 0).
  explicit CheckpointWriter(bool says_waits);
  // Finishes the write under way (its own files; a wait for other ranks' is cut short).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits until no write is under way (the log says so when one is, naming `due_step`, the step
  // whose checkpoint must wait); the failure of the write before, if it failed.
  Status WaitIdle(int64_t due_step);
  // Starts `write` (the checkpoint of `step`) on the writer's thread; call after WaitIdle.
  void Start(int64_t step, Write write);
  // Waits for the write under way; its failure, if it failed.
  Status Finish();

 private:
  void Loop();

  bool says_waits_;
  std::mutex mutex_;
  std::condition_variable changed_;
  Write pending_;           // guarded by mutex_; set by Start, taken by the thread
  bool busy_ = false;       // guarded by mutex_: a write is pending or under way
  int64_t busy_step_ = -1;  // guarded by mutex_
  Status failed_;           // guarded by mutex_: the first failed write's status, until returned
  bool closing_ = false;    // guarded by mutex_
  std::atomic<bool> stop_{false};
  // Note [A writer at low priority] in checkpoint_writer.cpp: the writer's thread id (guarded by
  // mutex_; 0 before it started) and the nice level of the training that made this writer.
  pid_t writer_thread_ = 0;
  int training_nice_ = 0;
  std::thread thread_;  // started by the first Start
};

}  // namespace dpl::training
