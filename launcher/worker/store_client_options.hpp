// How a worker reaches the job's store: the launcher passes it --store-addr host:port.
#pragma once

#include "cli/options.hpp"
#include "common/status.hpp"
#include "rendezvous/store.hpp"

namespace dpl::worker {

// The host and port of --store-addr, the job token, and --rendezvous-timeout to connect; the
// other timeouts are the store's defaults.
Result<rendezvous::StoreClientOptions> WorkerStoreClientOptions(const cli::Options& options);

}  // namespace dpl::worker
