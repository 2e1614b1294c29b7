// What a launcher tells its running workers when its elastic job regroups in place (Note [Shrink
// in place] in training/live_state.hpp): one key per worker in the store, under the attempt the
// worker runs, "attempt/<n>/regroup/rank-<r>", which names the next attempt and the worker's
// machine's place in it, or says that the worker stops. The worker's watch aborts its collectives
// when the key appears; its training then waits for the key's value.
#pragma once

#include <chrono>
#include <string>

#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {

struct RegroupOrder {
  bool stop = false;  // the worker ends with its failure (its machine is not in the next attempt)
  std::string why;    // for the log: "machine 2 (node9 ...) left", "a machine joins"
  int attempt = 0;    // the next attempt
  int place = 0;      // this machine's place in it
  int machines = 1;   // its machines
};

// Set ("1") in the environment of the workers of an elastic job that regroups in place; a worker
// without it keeps today's end: a lost peer ends it, and its launcher restarts it.
inline constexpr const char* kRegroupEnvironmentVariable = "DPL_REGROUP";

// The key of rank `rank` of the attempt whose prefix is `attempt_prefix`.
std::string RegroupKey(const std::string& attempt_prefix, int rank);

Status SendRegroupOrder(StoreClient& client, const std::string& attempt_prefix, int rank,
                        const RegroupOrder& order);
// Waits up to `timeout` for this rank's order.
Result<RegroupOrder> AwaitRegroupOrder(StoreClient& client, const std::string& attempt_prefix,
                                       int rank, std::chrono::milliseconds timeout);

// A worker of an attempt that regroups in place adds 1 here when a peer's connection failed: its
// launcher at place 0 then takes a shorter silence of a machine's heartbeat as its loss (a
// worker that saw it fail is a second witness).
std::string PeerFailureKey(const std::string& attempt_prefix);

// The key machine 0 sets when the attempt regroups (its value says why); every launcher of the
// attempt looks at it when it looks for a failure.
std::string RegroupCallKey(const std::string& attempt_prefix);

}  // namespace dpl::rendezvous
