// What a training worker does for its launcher's view of the job besides training: with
// --stall-warning, the watchdog that posts a blocked backend call to the store (Note [Stall
// reports] in observability/stall_report.hpp); with --trace, the clock alignment before training
// and the recorded timeline sent through the store after it (observability/trace_file.hpp).
#pragma once

#include <memory>
#include <string>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/job_reports.hpp"
#include "rendezvous/store.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

class WorkerObservability {
 public:
  // Called by every rank at the same point after the join (the clock alignment is a collective
  // of the store). `store` stays valid until Finish().
  static Result<std::unique_ptr<WorkerObservability>> Start(
      const cli::Options& options, const training::WorkerIdentity& identity,
      rendezvous::StoreClient& store, const std::string& attempt_prefix);
  ~WorkerObservability();
  WorkerObservability(const WorkerObservability&) = delete;
  WorkerObservability& operator=(const WorkerObservability&) = delete;

  // After a regroup in place (Note [Shrink in place] in training/live_state.hpp): the stall
  // watchdog posts as the next attempt's rank, and with --trace the clock is aligned again among
  // that attempt's ranks (the timeline recorded so far is kept). Every kept worker calls it where
  // a new machine's workers call Start.
  Status Regroup(const training::WorkerIdentity& identity, const std::string& attempt_prefix);

  // After training succeeded: sends the trace. A failure is logged, not returned: the training
  // is done, and the launcher says which rank's trace is missing.
  void Finish();

 private:
  WorkerObservability(const cli::Options& options, const training::WorkerIdentity& identity,
                      rendezvous::StoreClient& store, std::string attempt_prefix);

  Status WatchForStalls();
  Status AlignTraceClock();

  const cli::Options& options_;
  training::WorkerIdentity identity_;
  rendezvous::StoreClient& store_;
  std::string prefix_;
  // The watchdog's own connection: a long store call of the training thread (a Get of the
  // test-set sums) holds the main one, and a post must not wait for it.
  std::unique_ptr<rendezvous::StoreClient> stall_store_;
  bool tracing_ = false;
  rendezvous::ClockAlignment clock_;
};

}  // namespace dpl::worker
