// The members of each attempt of an elastic job (--num-machines MIN:MAX): which launchers run it,
// in which order, decided through the store by the attempt's coordinator, the lowest live
// launcher (machine 0 while it lives). Note [Elastic membership] in membership.cpp, Note [Attempt
// coordinator] in liveness.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// Beats are this far apart; a launcher whose beat did not move for kMemberLease is gone.
inline constexpr std::chrono::milliseconds kHeartbeatInterval{200};
inline constexpr std::chrono::milliseconds kMemberLease{3000};

struct Member {
  int machine_id = 0;  // the launcher's id (JoinAsLauncher), kept over attempts
  std::string name;    // "node7 10.0.0.7 pid 4242"
};

struct ElasticOptions {
  int min_machines = 1;
  int max_machines = 1;
  std::chrono::milliseconds join_grace{0};  // the coordinator closes an attempt when none came
  std::chrono::milliseconds timeout{0};     // the coordinator waits this long for min_machines
  std::function<bool()> stop_requested;     // a stop signal ends any wait
};

struct Attempt {
  enum class Outcome {
    kMember,    // this launcher runs the attempt, as members[index]
    kLeftOut,   // the attempt started without it: it takes part in the next one
    kJobEnded,  // the job is over (job_end says how)
    // The launcher that claimed the attempt vanished before it chose the members: every launcher
    // goes on to the next attempt (Note [Attempt coordinator]).
    kAbandoned,
  };
  Outcome outcome = Outcome::kMember;
  std::vector<Member> members;  // the coordinator first, then in the order they joined
  int index = -1;
  std::string job_end;  // for kJobEnded: "" when the job succeeded, else why it failed
};

// What a launcher brings to attempt `attempt`.
struct AttemptJoin {
  int attempt = 0;
  Member self;
  std::vector<Member> previous;  // the members of the attempt before
  std::set<int> gone;            // launchers known to have vanished: never waited for
};

// Every launcher of an elastic job before each attempt; the coordinator, the lowest live launcher,
// decides who runs it and waits for the members of `previous` whose launchers still beat.
// `coordinating` (optional) is set when this launcher claimed the attempt, also when it then
// failed: the coordinator ends the job. Errors: the store is gone, a stop was requested, or (the
// coordinator) too few machines came.
Result<Attempt> JoinAttempt(StoreClient& client, const AttemptJoin& join,
                            const ElasticOptions& options, bool* coordinating = nullptr);
// The same with nothing known gone.
Result<Attempt> JoinAttempt(StoreClient& client, int attempt, const Member& self,
                            const std::vector<Member>& previous, const ElasticOptions& options);

// Whether a launcher waits to join attempt `attempt` (took a slot of it): machine 0 calls a
// regroup for it (Note [Shrink in place] in training/live_state.hpp).
Result<bool> MachinesWaiting(StoreClient& client, int attempt);

// The coordinator ends the job for every launcher that waits for an attempt: `failure` "" is
// success. It returns once the launchers that took a slot of `waiting_attempt` have seen the end
// (Note [Elastic membership]).
Status EndElasticJob(StoreClient& client, const std::string& failure, int waiting_attempt);
// The counter EndElasticJob adds to first: above 0, the job under its token has ended.
inline constexpr const char* kJobEndKey = "job/end/count";

// What changed from `before` to `now`: "machine 2 (node9 10.0.0.9 pid 77) left; machine 3
// (node4 10.0.0.4 pid 81) joined"; "" when nothing did.
std::string DescribeMembershipChange(const std::vector<Member>& before,
                                     const std::vector<Member>& now);

// A launcher's beat in the store ("job/alive/<id>", a counter), from a thread with a connection
// of its own, for as long as the object lives.
class Heartbeat {
 public:
  static Result<std::unique_ptr<Heartbeat>> Start(const StoreClientOptions& options,
                                                  int machine_id);
  virtual ~Heartbeat() = default;
};

}  // namespace dpl::rendezvous
