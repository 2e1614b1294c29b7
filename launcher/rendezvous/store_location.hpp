// Where the job's store is (--store): the built-in store of machine 0, or an etcd cluster.
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::rendezvous {

struct StoreLocation {
  std::vector<std::string> etcd_endpoints;  // "host:port"; empty: the built-in store
  bool builtin() const { return etcd_endpoints.empty(); }
  // "the built-in store of machine 0", "the etcd cluster etcd://a:2379,b:2379".
  std::string Describe() const;
};

// --store: "" is the built-in store; "etcd://HOST:PORT[,HOST:PORT...]" the etcd cluster whose
// members have these client URLs. Anything else is refused naming the flag and what is wrong.
Result<StoreLocation> ParseStoreLocation(const std::string& text);

class StoreClient;
// Machine 0, before it publishes the job's settings: the built-in store is new with every job,
// but keys in etcd outlive their job by the lease's TTL (Note [Leases of the etcd store] in
// etcd_store.cpp). Keys of an earlier job with the same --job-token are refused, naming why.
Status RefuseEarlierJob(StoreClient& client, const StoreLocation& location);

}  // namespace dpl::rendezvous
