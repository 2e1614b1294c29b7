#include "worker/store_client_options.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "rendezvous/store_location.hpp"

namespace dpl::worker {

Result<rendezvous::StoreClientOptions> WorkerStoreClientOptions(const cli::Options& options) {
  const auto colon = options.store_addr.rfind(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("--store-addr '" + options.store_addr + "' is not host:port");
  }
  rendezvous::StoreClientOptions client_options;
  client_options.host = options.store_addr.substr(0, colon);
  client_options.port = std::atoi(options.store_addr.c_str() + colon + 1);
  client_options.job_token = options.job_token;
  DPL_ASSIGN_OR_RETURN(auto store, rendezvous::ParseStoreLocation(options.store));
  client_options.etcd_endpoints = store.etcd_endpoints;
  client_options.connect_timeout = options.rendezvous_timeout;
  return client_options;
}

Result<std::unique_ptr<rendezvous::StoreClient>> ConnectWorkerStore(
    const cli::Options& options, std::chrono::milliseconds bound) {
  DPL_ASSIGN_OR_RETURN(rendezvous::StoreClientOptions client_options,
                       WorkerStoreClientOptions(options));
  client_options.call_timeout = std::min(client_options.call_timeout, bound);
  client_options.keepalive_timeout = std::min(client_options.keepalive_timeout, bound);
  return rendezvous::StoreClient::Connect(client_options);
}

}  // namespace dpl::worker
