// Launchers' heartbeats through the store, so a launcher can tell that another machine's launcher
// vanished (killed, its machine or the network to it down) from one that is merely busy: each
// launcher of a job on several machines bumps a counter of its own every kHeartbeatInterval, from
// a thread of its own, while it supervises an attempt. Used to name the root cause of a failure
// (Note [Root cause] in failure_naming.hpp) and to end an attempt that lost a machine (Note [Lost
// machines] below).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_beat.hpp"

namespace dpl::supervision {

inline constexpr std::chrono::milliseconds kHeartbeatInterval{250};
// A launcher whose counter did not move for this long stopped beating: six beats missed.
inline constexpr std::chrono::milliseconds kHeartbeatSilence{1500};
// A machine silent for this long while no worker failed is lost (Note [Lost machines]): twelve
// beats missed, so that a launcher starved of the CPU for a moment does not end the attempt.
inline constexpr std::chrono::milliseconds kMachineLostSilence{3000};
// The same where the attempt regroups in place (Note [Shrink in place] in
// training/live_state.hpp): a machine taken for lost by mistake costs a regroup and joins again,
// so eight beats missed are enough.
inline constexpr std::chrono::milliseconds kMachineLostSilenceInPlace{2000};
// A machine of the attempt's membership that has not beaten once for this long never began the
// attempt (its launcher left between the membership and its workers' start): lost too. Every
// machine of the membership has joined the attempt and starts beating as it starts its workers,
// well within this; without it, the attempt would wait for the dead machine's ranks until the
// rendezvous timeout, saying nothing. In a fixed job a machine whose launcher has not come yet
// is no member that left: it is waited for until the rendezvous timeout (MachineWatch::Joining).
inline constexpr std::chrono::milliseconds kMachineNeverBegan{20000};

// This machine's heartbeat for one attempt; beats from construction until Finish() or
// destruction. A store call that fails ends the beating (the supervisor's own calls then fail).
class Heartbeat {
 public:
  Heartbeat(rendezvous::StoreClient& client, const std::string& attempt_prefix, int machine_id);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Stops beating and records that this machine finished the attempt, so its silence from now on
  // is no sign of trouble.
  void Finish();

 private:
  rendezvous::StoreClient& client_;
  const std::string key_;
  rendezvous::StoreBeat beat_;
  bool finished_ = false;
};

// Every machine's heartbeat counter in this attempt (this machine's too), read now.
Result<std::vector<int64_t>> ReadHeartbeats(rendezvous::StoreClient& client,
                                            const std::string& attempt_prefix,
                                            const rendezvous::JobShape& shape);

// The machines other than this one that were beating at `before` and did not beat since, nor
// finished, by `after` (read at least kHeartbeatSilence later).
std::vector<int> SilentMachines(const std::vector<int64_t>& before,
                                const std::vector<int64_t>& after, int this_machine);

// Note [Lost machines]: watches the heartbeats of the machines of one attempt. The machine at
// place 0 watches every other one; every other machine watches place 0 only, and learns of the
// rest from the failure place 0 publishes (each launcher reads it every poll anyway): one read per
// poll on most machines, N - 1 on one.
class MachineWatch {
 public:
  // Which machines have joined: all (an elastic attempt's members, or an attempt whose workers
  // already met), or in a fixed job those whose launchers claimed their --machine-id.
  enum class Joining { kAllJoined, kByClaimedId };
  MachineWatch(rendezvous::StoreClient& client, std::string attempt_prefix,
               const rendezvous::JobShape& shape, Joining joining = Joining::kAllJoined);
  // The watched machines that beat and then did not for `silence`, nor finished, and those that
  // never beat for kMachineNeverBegan since this watch first read them; an error when the store
  // cannot be read.
  Result<std::vector<int>> Lost(std::chrono::milliseconds silence = kMachineLostSilence);
  // Whether `machine` had not beaten once when Lost last read it: its workers never started, so
  // the others' workers are still connecting to its ranks and cannot regroup in place.
  bool NeverBegan(int machine) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Seen {
    int64_t beats = 0;
    Clock::time_point changed;
  };
  rendezvous::StoreClient& client_;
  std::string prefix_;
  Joining joining_;
  std::vector<int> watched_;
  std::map<int, Seen> seen_;
};

// Records in the store that `machines` (places of the attempt) were lost, for the launchers'
// next attempt (an elastic job waits for none of them), and reads it back after the attempt.
Status RecordLostMachines(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                          const std::vector<int>& machines);
std::vector<int> ReadLostMachines(rendezvous::StoreClient& client,
                                  const std::string& attempt_prefix, int num_machines);

// After this machine's attempt failed: waits, at most `timeout`, until every other machine that
// is still beating ended its attempt (its launcher saw the failure). Machines that never beat or
// went silent are not waited for.
void WaitForOtherMachinesToEnd(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                               const rendezvous::JobShape& shape,
                               std::chrono::milliseconds timeout);

}  // namespace dpl::supervision
