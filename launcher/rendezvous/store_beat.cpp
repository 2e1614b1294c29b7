#include "rendezvous/store_beat.hpp"

#include <utility>

namespace dpl::rendezvous {

StoreBeat::StoreBeat(StoreClient& client, std::string key, std::chrono::milliseconds interval)
    : client_(client), key_(std::move(key)), interval_(interval) {
  thread_ = std::thread([this] { Run(); });
}

StoreBeat::~StoreBeat() {
  Stop();
}

void StoreBeat::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StoreBeat::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    const bool beaten = client_.Add(key_, 1).ok();
    lock.lock();
    if (!beaten) return;
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace dpl::rendezvous
