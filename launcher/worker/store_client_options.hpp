// How a worker reaches the job's store: the launcher passes it --store-addr host:port.
#pragma once

#include <chrono>
#include <memory>

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::worker {

// The host and port of --store-addr, the job token, and --rendezvous-timeout to connect; the
// other timeouts are the store's defaults.
Result<rendezvous::StoreClientOptions> WorkerStoreClientOptions(const cli::Options& options);

// How long a call of a worker's side thread (the step times' exchange, the regroup watch) may
// wait for the store: a post or read it does not answer soon is given up, so that the thread
// never holds the worker's end for long (the store's failure is the launcher's to report).
inline constexpr std::chrono::milliseconds kStoreCallBound{2000};

// A connection of this worker to the job's store whose calls, and the wait for a silent store,
// end within `bound`.
Result<std::unique_ptr<rendezvous::StoreClient>> ConnectWorkerStore(
    const cli::Options& options, std::chrono::milliseconds bound);

}  // namespace dpl::worker
