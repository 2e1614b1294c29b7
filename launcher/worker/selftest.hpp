// `launcher --selftest`: after the join, every rank posts its rank to the store and reads every
// other rank's back, then runs a barrier and an allgather of ranks through the chosen backend, so
// both the rendezvous and the backend's connections are checked without a model; then the link
// test (worker/link_test.hpp) measures every link, and rank 0 prints its table. --preflight runs
// the link test alone before training.
#pragma once

#include "common/status.hpp"
#include "training/collectives/backend.hpp"
#include "worker/link_test.hpp"

namespace dpl::worker {

// `backend` is the job's instance of `setup.plugin`.
Status RunSelftest(const LinkTestSetup& setup, training::Backend& backend);

// --preflight: the link test; rank 0 logs the slowest link and warns of every slow link (Note
// [Slow links]). A link that fails fails the job, as it would fail training.
Status RunPreflight(const LinkTestSetup& setup);

}  // namespace dpl::worker
