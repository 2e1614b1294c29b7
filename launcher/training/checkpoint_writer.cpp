#include "training/checkpoint_writer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "common/log.hpp"

namespace dpl::training {
namespace {

// A write that ends within this many seconds of the next checkpoint's step is not worth a line.
constexpr double kWaitWorthSaying = 0.01;

// Note [A writer at low priority]: the write's own CPU work (the zip records' CRC-32, the copies
// into the page cache) taken at the priority of the training threads preempts one of them now
// and then, and a step's parallel regions wait for their slowest thread, so a write cost several
// times its CPU time in steps (docs/elastic.md, "Checkpoints that do not stop training"). So the
// writer runs at the lowest nice level, kLowPriority: it takes mostly the gaps of the steps, yet
// never starves as an idle-class thread does on a machine loaded by anything else (SCHED_IDLE
// was tried: a job that failed a few steps after a checkpoint lost it, its writer starved until
// the worker was stopped). Whenever training waits for the write (the next checkpoint due, the
// end, a preemption, a failure) the writer is raised back to the training's priority, where the
// system allows it (raising needs CAP_SYS_NICE or RLIMIT_NICE; without it the waiting training
// leaves the writer the cores anyway). Best effort throughout: a priority that cannot be set
// leaves the writer as it was.
constexpr int kLowPriority = 19;

void SetNice(pid_t thread, int nice) {
  if (thread > 0) (void)setpriority(PRIO_PROCESS, static_cast<id_t>(thread), nice);
}

}  // namespace

CheckpointWriter::CheckpointWriter(bool says_waits)
    : says_waits_(says_waits), training_nice_(getpriority(PRIO_PROCESS, 0)) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    if (busy_) SetNice(writer_thread_, training_nice_);
  }
  stop_.store(true);
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status CheckpointWriter::WaitIdle(int64_t due_step) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto waited_from = std::chrono::steady_clock::now();
  const bool waited = busy_;
  const int64_t written_step = busy_step_;
  if (waited) SetNice(writer_thread_, training_nice_);  // Note [A writer at low priority]
  changed_.wait(lock, [&] { return !busy_; });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
  if (waited && says_waits_ && seconds >= kWaitWorthSaying) {
    log::Warning("the checkpoint of step " + std::to_string(written_step) +
                 " was still being written as step " + std::to_string(due_step) +
                 "'s came due: training waited " + log::Duration(seconds) +
                 " for it (a write takes longer than --checkpoint-every steps train; checkpoint "
                 "less often, or onto a faster disk)");
  }
  return std::exchange(failed_, Status::Ok());
}

void CheckpointWriter::Start(int64_t step, Write write) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(write);
    busy_ = true;
    busy_step_ = step;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  changed_.notify_all();
}

Status CheckpointWriter::Finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (busy_) SetNice(writer_thread_, training_nice_);  // Note [A writer at low priority]
  changed_.wait(lock, [&] { return !busy_; });
  return std::exchange(failed_, Status::Ok());
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  writer_thread_ = gettid();
  while (true) {
    changed_.wait(lock, [&] { return pending_ != nullptr || closing_; });
    if (pending_ == nullptr) return;  // closing, nothing left to write
    Write write = std::move(pending_);
    pending_ = nullptr;
    if (!closing_) SetNice(writer_thread_, kLowPriority);  // raised by a wait until the next
    lock.unlock();
    const Status written = write(stop_);
    lock.lock();
    if (!written.ok() && failed_.ok()) failed_ = written;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace dpl::training
