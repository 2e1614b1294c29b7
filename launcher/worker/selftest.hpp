// `launcher --selftest`: after the join, every rank posts its rank to the store and reads every
// other rank's back, then runs a barrier and an allgather of ranks through the chosen backend, so
// both the rendezvous and the backend's connections are checked without a model.
#pragma once

#include "common/status.hpp"
#include "rendezvous/store.hpp"
#include "training/backend.hpp"
#include "training/worker_identity.hpp"

namespace dpl::worker {

Status RunSelftest(rendezvous::StoreClient& store, const std::string& prefix,
                   const training::WorkerIdentity& identity, training::Backend& backend,
                   std::chrono::milliseconds timeout);

}  // namespace dpl::worker
