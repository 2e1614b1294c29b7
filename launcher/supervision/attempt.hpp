// One attempt of the job on this machine, as the restart loops of a fixed job (launcher.cpp) and
// of an elastic one (elastic_job.cpp) run it: the store and this launcher's place in the job, the
// attempt's options, the attempt itself and how it ended.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::supervision {

// The store, its client and who this launcher is in the job.
struct Joined {
  std::unique_ptr<rendezvous::StoreServer> server;  // machine 0's
  rendezvous::StoreClientOptions client_options;
  std::unique_ptr<rendezvous::StoreClient> client;
  int machine_id = 0;
  std::string machine_name;
  std::string store_addr;  // host:port, for the workers
  int port = 0;
};

// Machine 0's store carries the failure to the other machines: after the job's last attempt
// failed, machine 0 keeps it up until they saw it, for at most this long, so they print the root
// cause instead of "lost the rendezvous store".
inline constexpr std::chrono::seconds kFailureDeliveryTimeout{3};

// The options of one attempt: its machines, this machine's place among them, the store's port;
// for an elastic job, its members' ids by place (none for a fixed job).
cli::Options AttemptOptions(const cli::Options& options, const Joined& joined, int machines,
                            int place, std::vector<int> machine_ids_by_place = {});

class Supervisor;

// An elastic job's attempts whose workers regroup in place (Note [Shrink in place] in
// training/live_state.hpp).
struct Regrouping {
  int max_machines = 0;  // the job's most machines; 0: its attempts never regroup
  // The supervisor of the attempt before, when it regrouped: its workers run on in the next.
  std::unique_ptr<Supervisor> kept;
  Regrouping();
  ~Regrouping();  // stops the workers of `kept`, if any
};

// How one attempt ended on this machine.
struct AttemptEnd {
  Status status;
  bool regrouped = false;  // Ok, and its workers wait for the next attempt (regrouping.kept)
  std::string regroup_why;
  bool worth_restarting = true;    // false when a restart would fail the same way
  bool preempted = false;          // Ok, and its workers stopped for a preemption
  bool left = false;               // a stop signal took this machine out of an elastic job
  std::vector<int> lost_machines;  // places of the machines it found vanished
};

// Runs one attempt on this machine; Ok when its workers all succeeded (or all stopped for a
// preemption) and, on the machine at place 0, every other machine reported the same.
// With `regrouping`, its kept workers go on in this attempt, and this attempt's workers are kept
// there when it regroups.
AttemptEnd RunAttempt(const cli::Options& attempt_options, Joined& joined, int attempt,
                      Regrouping* regrouping = nullptr);

// Whether a failed attempt may be tried again: restarts left, worth it, and no stop or
// preemption asked.
bool MayRestart(const AttemptEnd& end, int restarts_done, int max_restarts);
// Note [A preemption instead of a restart] in attempt.cpp: the launcher's exit code (75) where
// a failure that would restart meets a preemption asked meanwhile; none otherwise.
std::optional<int> PreemptedInsteadOfRestart(const AttemptEnd& end, int restarts_done,
                                             int max_restarts);

// Logs `status` as an error; returns the launcher's exit code for it, 1.
int Fail(const Status& status);
// Says that the job stopped for a preemption; returns the launcher's exit code for it,
// protocol::kPreemptedExitCode.
int EndPreempted();

}  // namespace dpl::supervision
