// The rendezvous store: the job's key/value store (set, get, wait, add, delete), used by every
// launcher and worker of the job (after c10d's Store). StoreClient is the interface; behind it
// are two stores (StoreClient::Connect picks by StoreClientOptions::etcd_endpoints):
//  - the built-in store (the default): a TCP store served by the launcher of machine 0 (after
//    c10d's TCPStore). Wire protocol and limits are in wire_protocol.hpp; the server is
//    store_server.cpp (each of its connections store_session.cpp), the client store_client.cpp.
//    The job cannot outlive machine 0.
//  - an etcd cluster (--store etcd://HOST:PORT,...): the keys live in etcd, replicated by its
//    members, so the store outlives any machine of the job (etcd_store.cpp). docs/store.md says
//    what each operation costs on each.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/store.h"

namespace dpl::rendezvous {

// Deadlines of the server and the client: Note [Deadlines and dead peers] in store_server.cpp and
// Note [Client deadlines] in store_client.cpp say what each bounds.
inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{300000};
inline constexpr std::chrono::milliseconds kDefaultCallTimeout{10000};
inline constexpr std::chrono::milliseconds kDefaultHandshakeTimeout{10000};
inline constexpr std::chrono::milliseconds kDefaultFrameTimeout{30000};
inline constexpr std::chrono::milliseconds kDefaultKeepaliveTimeout{30000};
inline constexpr int kDefaultMaxPendingHandshakes = 128;
// How long the job's keys in etcd outlive the last process of the job (Note [Leases of the etcd
// store] in etcd_store.cpp).
inline constexpr std::chrono::milliseconds kDefaultEtcdLeaseTtl{10000};

struct StoreServerOptions {
  std::string bind_addr = "0.0.0.0";
  int port = 0;           // 0 picks a free port; see StoreServer::port()
  std::string job_token;  // clients must present the same token ("" = none required)
  // A connection must complete its handshake this long after it was accepted, or it is closed.
  std::chrono::milliseconds handshake_timeout = kDefaultHandshakeTimeout;
  // A frame (request or reply) must be complete this long after its first byte moved, or the
  // connection is closed. Between frames a connection may stay idle for any time.
  std::chrono::milliseconds frame_timeout = kDefaultFrameTimeout;
  // A connection whose peer stops answering TCP keepalive probes (machine down, network cut) is
  // closed after about this long; rounded to whole seconds, at least 3 s.
  std::chrono::milliseconds keepalive_timeout = kDefaultKeepaliveTimeout;
  // At most this many connections may be waiting for their handshake: one accepted beyond it
  // evicts the oldest of them (Note [Deadlines and dead peers] in store_server.cpp).
  int max_pending_handshakes = kDefaultMaxPendingHandshakes;
};

// Serves the store on a background thread until destroyed.
class StoreServer {
 public:
  // Binds and starts serving. A port in use is an error naming addr:port.
  static Result<std::unique_ptr<StoreServer>> Start(const StoreServerOptions& options);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
};

// Whose lease the keys a client of the etcd store writes carry (Note [Leases of the etcd store]).
enum class KeyLifetime {
  kJob,     // the job's: they last while any process of the job lives
  kClient,  // this client's own: they vanish when it is destroyed or its process dies
};

struct StoreClientOptions {
  std::string host;  // the built-in store's
  int port = 0;
  // The job's keys are in the etcd cluster whose members' client URLs these are ("host:port",
  // tried in order, --store etcd://...) instead of the built-in store at host:port.
  std::vector<std::string> etcd_endpoints;
  // Selects the job's keys in the built-in store, and their key prefix in etcd.
  std::string job_token;
  // How long to keep retrying (with backoff) to reach the server and complete the handshake before
  // failing with a message that names host:port.
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
  // The longest a call may take: Set, Add and Delete within call_timeout, Get and Wait within
  // their own timeout plus call_timeout. A call past it fails with DPL_ERR_TIMEOUT and leaves a
  // client of the built-in store broken: every later call fails with DPL_ERR_COMMUNICATION.
  std::chrono::milliseconds call_timeout = kDefaultCallTimeout;
  // As StoreServerOptions::keepalive_timeout: a call blocked on a server that vanished fails after
  // about this long even inside a long Get or Wait.
  std::chrono::milliseconds keepalive_timeout = kDefaultKeepaliveTimeout;
  // etcd only: the lease's time to live, in whole seconds, and whose lease the keys carry.
  std::chrono::milliseconds etcd_lease_ttl = kDefaultEtcdLeaseTtl;
  KeyLifetime key_lifetime = KeyLifetime::kJob;
  // etcd, a launcher's client: the counter (as the client names keys) that is above 0 when the
  // job under this token has ended; found so when the client connects, that job's lease is
  // revoked and a new one taken (Note [A token used again] in etcd_store.cpp). "": none.
  std::string ended_job_key;
};

// A blocking client of either store. Thread-safe (calls are serialised). A server that closed
// the connection or stopped answering fails the call with DPL_ERR_COMMUNICATION or
// DPL_ERR_TIMEOUT; a Get or Wait whose keys did not appear in time fails with DPL_ERR_TIMEOUT and
// leaves the client usable.
class StoreClient {
 public:
  // The built-in store's client, or etcd's when options.etcd_endpoints is not empty.
  static Result<std::unique_ptr<StoreClient>> Connect(const StoreClientOptions& options);
  virtual ~StoreClient() = default;

  virtual Status Set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits up to `timeout` for the key to exist.
  virtual Result<std::vector<uint8_t>> Get(const std::string& key,
                                           std::chrono::milliseconds timeout) = 0;
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the counter at `key` (decimal text; a missing key counts 0 and is created)
  // and returns the sum. A value that is not a counter is refused.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  virtual Status Delete(const std::string& key) = 0;
};

// Each store's own connect (StoreClient::Connect picks one).
Result<std::unique_ptr<StoreClient>> ConnectBuiltinStore(const StoreClientOptions& options);
Result<std::unique_ptr<StoreClient>> ConnectEtcdStore(const StoreClientOptions& options);

// A C view (dpl_store_v1) of a client for a plugin, with every key prefixed by `key_prefix`.
// The returned object owns the view; keep it alive as long as the plugin uses it.
class PluginStoreView {
 public:
  PluginStoreView(StoreClient& client, std::string key_prefix);
  const dpl_store_v1* view() const { return &view_; }

 private:
  StoreClient& client_;
  std::string key_prefix_;
  dpl_store_v1 view_;
  friend struct PluginStoreViewAccess;
};

}  // namespace dpl::rendezvous
