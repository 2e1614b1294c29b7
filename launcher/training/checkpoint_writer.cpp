#include "training/checkpoint_writer.hpp"

#include <chrono>
#include <utility>

#include "common/log.hpp"

namespace dpl::training {

CheckpointWriter::CheckpointWriter(bool says_waits) : says_waits_(says_waits) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  stop_.store(true);
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status CheckpointWriter::WaitIdle(int64_t due_step) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (busy_ && says_waits_) {
    log::Warning("the checkpoint of step " + std::to_string(busy_step_) +
                 " is still being written as step " + std::to_string(due_step) +
                 "'s is due: training waits for it (a write takes longer than --checkpoint-every " +
                 "steps train; checkpoint less often, or onto a faster disk)");
  }
  const auto waited_from = std::chrono::steady_clock::now();
  const bool waited = busy_;
  changed_.wait(lock, [&] { return !busy_; });
  if (waited && says_waits_) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
    log::Info("training waited " + log::Duration(seconds) + " for the checkpoint before");
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
  changed_.wait(lock, [&] { return !busy_; });
  return std::exchange(failed_, Status::Ok());
}

void CheckpointWriter::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return pending_ != nullptr || closing_; });
    if (pending_ == nullptr) return;  // closing, nothing left to write
    Write write = std::move(pending_);
    pending_ = nullptr;
    lock.unlock();
    const Status written = write(stop_);
    lock.lock();
    if (!written.ok() && failed_.ok()) failed_ = written;
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace dpl::training
