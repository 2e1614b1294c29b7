// The rendezvous store: a TCP key/value store (set, get, wait, add, delete) served by the
// launcher of machine 0 and used by every launcher and worker of the job (after c10d's TCPStore).
// Wire protocol and limits are in wire_protocol.hpp; the server is store_server.cpp (each of its
// connections store_session.cpp), the client store_client.cpp.
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
  // Connections accepted beyond this many that have not completed the handshake are closed at once
  // (their clients retry within their connect_timeout).
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

struct StoreClientOptions {
  std::string host;
  int port = 0;
  std::string job_token;
  // How long to keep retrying (with backoff) to reach the server and complete the handshake before
  // failing with a message that names host:port.
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
  // The longest a call may take: Set, Add and Delete within call_timeout, Get and Wait within
  // their own timeout plus call_timeout. A call past it fails with DPL_ERR_TIMEOUT and leaves the
  // client broken: every later call fails with DPL_ERR_COMMUNICATION.
  std::chrono::milliseconds call_timeout = kDefaultCallTimeout;
  // As StoreServerOptions::keepalive_timeout: a call blocked on a server that vanished fails after
  // about this long even inside a long Get or Wait.
  std::chrono::milliseconds keepalive_timeout = kDefaultKeepaliveTimeout;
};

// A blocking client. Thread-safe (calls are serialised on one connection). A server that closed
// the connection or stopped answering fails the call with DPL_ERR_COMMUNICATION or
// DPL_ERR_TIMEOUT; a Get or Wait whose keys did not appear in time fails with DPL_ERR_TIMEOUT and
// leaves the client usable.
class StoreClient {
 public:
  static Result<std::unique_ptr<StoreClient>> Connect(const StoreClientOptions& options);
  virtual ~StoreClient() = default;

  virtual Status Set(const std::string& key, const std::vector<uint8_t>& value) = 0;
  // Waits up to `timeout` for the key to exist.
  virtual Result<std::vector<uint8_t>> Get(const std::string& key,
                                           std::chrono::milliseconds timeout) = 0;
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  virtual Status Delete(const std::string& key) = 0;
};

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
