// Whether the launchers of an elastic job are alive, from their beats in the store
// ("job/alive/<id>", Heartbeat in membership.hpp), and which of them coordinates an attempt: the
// lowest live one (Note [Attempt coordinator] in liveness.cpp).
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

// The key a launcher beats in.
std::string AliveKey(int machine_id);

// Marks launcher `machine_id` gone for every launcher of the job, those that join later too: an
// attempt found its beat stopped, and a vanished id is never taken again (Note [A vanished
// launcher's id] in join.cpp).
Status RecordGone(StoreClient& client, int machine_id);

// A launcher is alive while its beat moves: one whose counter did not change for `lease` since
// this watch first read it has left (killed, its machine down). Launchers in `gone` are known to
// have left (a failed attempt found their beat stopped) and are not read again, nor are those
// recorded gone in the store (RecordGone): a launcher that joined after they left does not wait a
// lease on each of them.
class LivenessWatch {
 public:
  LivenessWatch(std::chrono::milliseconds lease, std::set<int> gone);
  Result<bool> Alive(StoreClient& client, int machine_id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Seen {
    int64_t beats = 0;
    Clock::time_point changed;
  };
  std::chrono::milliseconds lease_;
  std::set<int> gone_;
  std::map<int, Seen> seen_;
};

// One launcher's part in choosing the coordinator of an attempt (Note [Attempt coordinator]).
class CoordinatorElection {
 public:
  enum class Turn {
    kWait,                // a live launcher with a lower id coordinates, or will
    kCoordinate,          // this launcher claimed the attempt: it decides the members
    kCoordinatorVanished  // the claimer's beat stopped before it wrote the members
  };
  // `members_prefix` is "attempt/<n>/members/".
  CoordinatorElection(StoreClient& client, std::string members_prefix, int self,
                      LivenessWatch& watch);
  // Looks once more: claims the attempt when every launcher below this one has left and none
  // claimed it yet. A launcher claims at most once; after kCoordinate, call no more.
  Result<Turn> Poll();

 private:
  Result<bool> EveryLowerLauncherLeft();
  Result<Turn> WatchClaimer();

  StoreClient& client_;
  std::string prefix_;
  int self_;
  LivenessWatch& watch_;
  int lowest_unchecked_ = 0;  // launchers below it have left
  int claimer_ = -1;          // the launcher that claimed, once read
};

}  // namespace dpl::rendezvous
