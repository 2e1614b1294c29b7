#include "rendezvous/liveness.hpp"

#include <cstdlib>
#include <utility>

#include "rendezvous/join.hpp"

// Note [Attempt coordinator]
// Each attempt of an elastic job is decided by one launcher, its coordinator, which writes the
// attempt's member list (Note [Elastic membership] in membership.cpp). It is the launcher with the
// lowest id that is still alive, so machine 0 while it lives; with the built-in store that is
// always machine 0 (the store ends with it), while with etcd the job survives it and the next
// launcher takes over:
// - A launcher claims attempt n when every launcher with a lower id has left: known gone (the
//   attempt before found its beat stopped) or its beat unchanged for kMemberLease. The claim is a
//   counter, "attempt/<n>/members/coordinator/claims": the launcher whose Add makes it 1 is the
//   coordinator and writes its id next to it; two launchers that both see the lower ones gone
//   cannot both win. Machine 0 claims at once.
// - A launcher that waits for the list watches the claimer's beat: when it stops before the list
//   is written, the attempt is abandoned and every launcher goes on to the next one, whose
//   coordinator is again the lowest live launcher. No wait is without a bound.
// - The coordinator is first in its list: it runs ranks 0..P-1, so rank 0's duties (checkpoints,
//   the trace, the job's end) move with it.

namespace dpl::rendezvous {
namespace {

constexpr auto kClaimerIdWait = std::chrono::seconds(2);  // written right after the claim

}  // namespace

std::string AliveKey(int machine_id) {
  return "job/alive/" + std::to_string(machine_id);
}

namespace {

std::string GoneKey(int machine_id) {
  return "job/gone/" + std::to_string(machine_id);
}

}  // namespace

Status RecordGone(StoreClient& client, int machine_id) {
  return client.Set(GoneKey(machine_id), ToBytes("1"));
}

LivenessWatch::LivenessWatch(std::chrono::milliseconds lease, std::set<int> gone)
    : lease_(lease), gone_(std::move(gone)) {}

Result<bool> LivenessWatch::Alive(StoreClient& client, int machine_id) {
  if (gone_.count(machine_id) != 0) return false;
  DPL_ASSIGN_OR_RETURN(auto beats, client.Add(AliveKey(machine_id), 0));
  const auto now = Clock::now();
  auto seen = seen_.find(machine_id);
  if (seen == seen_.end()) {
    auto recorded = client.Get(GoneKey(machine_id), std::chrono::milliseconds(0));
    if (recorded.ok()) {
      gone_.insert(machine_id);
      return false;
    }
    if (!recorded.status().IsTimeout()) return recorded.status();
  }
  if (seen == seen_.end() || seen->second.beats != beats) {
    seen_[machine_id] = {beats, now};
    return true;
  }
  if (now - seen->second.changed < lease_) return true;
  gone_.insert(machine_id);
  return false;
}

CoordinatorElection::CoordinatorElection(StoreClient& client, std::string members_prefix, int self,
                                         LivenessWatch& watch)
    : client_(client), prefix_(std::move(members_prefix)), self_(self), watch_(watch) {}

Result<bool> CoordinatorElection::EveryLowerLauncherLeft() {
  while (lowest_unchecked_ < self_) {
    DPL_ASSIGN_OR_RETURN(auto alive, watch_.Alive(client_, lowest_unchecked_));
    if (alive) return false;
    ++lowest_unchecked_;
  }
  return true;
}

Result<CoordinatorElection::Turn> CoordinatorElection::WatchClaimer() {
  if (claimer_ < 0) {
    auto id = client_.Get(prefix_ + "coordinator/id", kClaimerIdWait);
    // A claimer that died between its claim and its id is given up like a silent one.
    if (!id.ok() && !id.status().IsTimeout()) return id.status();
    claimer_ = id.ok() ? std::atoi(FromBytes(*id).c_str()) : -1;
    if (claimer_ < 0) return Turn::kCoordinatorVanished;
  }
  DPL_ASSIGN_OR_RETURN(auto alive, watch_.Alive(client_, claimer_));
  return alive ? Turn::kWait : Turn::kCoordinatorVanished;
}

Result<CoordinatorElection::Turn> CoordinatorElection::Poll() {
  DPL_ASSIGN_OR_RETURN(auto claims, client_.Add(prefix_ + "coordinator/claims", 0));
  if (claims > 0) return WatchClaimer();
  DPL_ASSIGN_OR_RETURN(auto lowest, EveryLowerLauncherLeft());
  if (!lowest) return Turn::kWait;
  DPL_ASSIGN_OR_RETURN(claims, client_.Add(prefix_ + "coordinator/claims", 1));
  if (claims != 1) return WatchClaimer();  // another launcher claimed it first
  DPL_RETURN_IF_ERROR(client_.Set(prefix_ + "coordinator/id", ToBytes(std::to_string(self_))));
  return Turn::kCoordinate;
}

}  // namespace dpl::rendezvous
