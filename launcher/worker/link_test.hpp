// The link test of `launcher --selftest` and `--preflight`: the latency and bandwidth between every
// two machines of the job and between every two workers of each machine, measured through the
// job's own backend, as a table that names the slowest link, and warnings for links far slower
// than the others of their kind.
//
// Note [Link test]
// The backend ABI has collectives only, no send and receive, so each link gets a backend instance
// of its own between its two ranks: a world of two, created from the job's backend plugin through
// a store view of the link's own prefix (as worker/backend_bootstrap.cpp creates the job's). A
// link between machines is measured between their local ranks 0; a link within a machine between
// two of its workers. The links are measured in rounds of a round-robin tournament: in a round
// every machine (every worker, within the machines) is in one link at most, so no two links of a
// round share a machine's network and every rank takes part in at most one link at a time. On
// each link: a one-float allreduce repeated for up to kLatencyBudget (the latency: the median
// round), then broadcasts one way and the other of a message growing fourfold from 64 KiB until
// one takes kTransferTargetSeconds (20 ms), then twice more at that size (the bandwidth: the
// slower direction's, in the median of the three), each pair deciding together from the figures
// they share when to stop. The pair's first rank writes the figures into the store;
// rank 0 reads them all. A link takes a few hundred milliseconds: the whole test takes one round
// per machine (M - 1 for an even number M, M for an odd one) and one per worker of a machine
// (likewise), at most about 0.4 s each on a healthy network.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "plugin_host/plugin_host.hpp"
#include "rendezvous/store.hpp"
#include "training/worker_identity.hpp"
#include "worker/link_report.hpp"

namespace dpl::worker {

// Each round's links as pairs of players 0..n-1 (the circle method: n - 1 rounds for an even n,
// n for an odd one, each player in at most one pair a round; every two players meet once).
std::vector<std::vector<std::pair<int, int>>> RoundRobin(int players);

struct LinkTestSetup {
  rendezvous::StoreClient* store = nullptr;
  std::string prefix;  // the attempt's key prefix
  training::WorkerIdentity identity;
  const cli::Options* options = nullptr;
  plugin_host::LoadedPlugin plugin;  // the job's backend: each link gets an instance of its own
  int32_t backend_device_type = 0;   // the memory the job's backend instance moves
  std::chrono::milliseconds timeout{0};
};

// Every rank calls it once; they return together. Rank 0's report holds every link; the others'
// hold their own links only. A report without links says why in `skipped` (one worker, a backend
// that moves device memory only).
Result<LinkReport> RunLinkTest(const LinkTestSetup& setup);

}  // namespace dpl::worker
