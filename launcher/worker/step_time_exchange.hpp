// How the ranks' step times reach rank 0 (Note [Stragglers] in training/stragglers.hpp): each
// worker records its time after every optimizer step (a lock and a copy, nothing more); a thread
// of its own, on a store connection of its own, posts the newest kPostedSteps of them every
// kExchangePeriod, and on rank 0 reads every rank's post. The training thread never waits on the
// store for them. Lives in worker/, which owns the worker's store; no collective of the backend.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/store.hpp"
#include "training/stragglers.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

inline constexpr std::chrono::milliseconds kExchangePeriod{200};
inline constexpr size_t kPostedSteps = 64;

class StepTimeExchange final : public training::StepTimeSharing {
 public:
  // Whether a run compares its ranks' step times: several ranks and --straggler-factor not 0.
  static bool Wanted(const cli::Options& options, const training::WorkerIdentity& identity);
  // Connects its own store client and starts its thread.
  static Result<std::unique_ptr<StepTimeExchange>> Start(const cli::Options& options,
                                                         const training::WorkerIdentity& identity,
                                                         const std::string& attempt_prefix);
  ~StepTimeExchange() override;

  void Record(int64_t step, double seconds) override;
  std::vector<training::RankStepTimes> Collect() override;

  // A post's text: a line "<machine> <host>", then a line "<step> <microseconds>" a step; and
  // back (nullopt: not a post).
  static std::string Encode(const training::RankStepTimes& times);
  static std::optional<training::RankStepTimes> Decode(int rank, const std::string& text);

 private:
  StepTimeExchange(std::unique_ptr<rendezvous::StoreClient> store,
                   const training::WorkerIdentity& identity, int machine,
                   std::string attempt_prefix);
  void Loop();
  // One round: this rank's post, and on rank 0 every rank's read. False once the store failed.
  bool Exchange();

  std::unique_ptr<rendezvous::StoreClient> store_;
  int rank_;
  int world_size_;
  int machine_;
  std::string host_;
  std::string prefix_;
  std::mutex mutex_;
  std::condition_variable stopping_;
  bool stop_ = false;                               // guarded by mutex_
  bool recorded_ = false;                           // guarded by mutex_: a step since the post
  std::deque<std::pair<int64_t, double>> recent_;   // guarded by mutex_
  std::vector<training::RankStepTimes> collected_;  // guarded by mutex_ (rank 0)
  std::vector<int64_t> newest_read_;                // the thread's: each rank's newest step read
  std::thread thread_;
};

}  // namespace dpl::worker
