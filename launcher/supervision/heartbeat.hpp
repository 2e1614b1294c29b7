// Launchers' heartbeats through the store, so a launcher can tell that another machine's launcher
// vanished (killed, its machine or the network to it down) from one that is merely busy: each
// launcher of a job on several machines bumps a counter of its own every kHeartbeatInterval, from
// a thread of its own, while it supervises an attempt. Used to name the root cause of a failure
// (Note [Root cause] in failure_naming.hpp).
#pragma once

#include <chrono>
#include <cstdint>
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

// After this machine's attempt failed: waits, at most `timeout`, until every other machine that
// is still beating ended its attempt (its launcher saw the failure). Machines that never beat or
// went silent are not waited for.
void WaitForOtherMachinesToEnd(rendezvous::StoreClient& client, const std::string& attempt_prefix,
                               const rendezvous::JobShape& shape,
                               std::chrono::milliseconds timeout);

}  // namespace dpl::supervision
