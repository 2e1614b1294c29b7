// The members of each attempt of an elastic job (--num-machines MIN:MAX): which launchers run it,
// in which order, decided by machine 0 through the store. Note [Elastic membership] in
// membership.cpp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
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
  std::chrono::milliseconds join_grace{0};  // machine 0 closes an attempt when none came for this
  std::chrono::milliseconds timeout{0};     // machine 0 waits this long for min_machines
  std::function<bool()> stop_requested;     // a stop signal ends any wait
};

struct Attempt {
  enum class Outcome {
    kMember,    // this launcher runs the attempt, as members[index]
    kLeftOut,   // the attempt started without it: it takes part in the next one
    kJobEnded,  // the job is over (job_end says how)
  };
  Outcome outcome = Outcome::kMember;
  std::vector<Member> members;  // machine 0 first, then in the order they joined
  int index = -1;
  std::string job_end;  // for kJobEnded: "" when the job succeeded, else why it failed
};

// Every launcher of an elastic job before each attempt; machine 0 decides who runs it. `previous`
// are the members of the attempt before (machine 0 waits for those whose launchers still beat).
// Errors: the store is gone, a stop was requested, or (machine 0) too few machines came.
Result<Attempt> JoinAttempt(StoreClient& client, int attempt, const Member& self,
                            const std::vector<Member>& previous, const ElasticOptions& options);

// Machine 0 ends the job for every launcher that waits for an attempt: `failure` "" is success.
Status EndElasticJob(StoreClient& client, const std::string& failure);

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
