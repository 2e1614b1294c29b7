// Fills the next batch on a thread of its own while the current step runs: with two host batch
// buffers, a step waits for its data only when gathering it takes longer than the step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "common/status.hpp"
#include "training/batch_buffer.hpp"
#include "training/data.hpp"

namespace dpl::training {

class BatchPrefetcher {
 public:
  explicit BatchPrefetcher(DataSplit& data);
  ~BatchPrefetcher();  // waits for a fill under way
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Starts filling `buffer` with samples indices[0..n) of `epoch` (the indices stay valid until
  // Wait returns). At most one fill is under way: call Wait first.
  void Start(BatchBuffer* buffer, const int64_t* indices, int64_t n, int64_t epoch);
  // Waits for the fill started last and returns its status (Ok when none was started).
  Status Wait();

 private:
  void Loop();

  DataSplit& data_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool pending_ = false;  // a fill is requested or under way
  BatchBuffer* buffer_ = nullptr;
  const int64_t* indices_ = nullptr;
  int64_t count_ = 0;
  int64_t epoch_ = 0;
  Status result_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace dpl::training
