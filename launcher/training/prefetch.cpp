#include "training/prefetch.hpp"

namespace dpl::training {

BatchPrefetcher::BatchPrefetcher(DataSplit& data) : data_(data), thread_([this] { Loop(); }) {}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !pending_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BatchPrefetcher::Start(BatchBuffer* buffer, const int64_t* indices, int64_t n, int64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    buffer_ = buffer;
    indices_ = indices;
    count_ = n;
    epoch_ = epoch;
    result_ = Status::Ok();
    pending_ = true;
  }
  changed_.notify_all();
}

Status BatchPrefetcher::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_; });
  return result_;
}

void BatchPrefetcher::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || pending_; });
    if (stopping_) return;
    BatchBuffer* buffer = buffer_;
    const int64_t* indices = indices_;
    const int64_t n = count_, epoch = epoch_;
    lock.unlock();
    Status filled = data_.Fill(indices, epoch, buffer->Input(n), buffer->Target(n));
    lock.lock();
    result_ = std::move(filled);
    pending_ = false;
    changed_.notify_all();
  }
}

}  // namespace dpl::training
