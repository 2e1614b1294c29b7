// The rendezvous store: a TCP key/value store (set, get, wait, add, delete) served by the
// launcher of machine 0 and used by every launcher and worker of the job (after c10d's TCPStore).
// Wire protocol and limits are in wire_protocol.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/store.h"

namespace dpl::rendezvous {

inline constexpr std::chrono::milliseconds kDefaultConnectTimeout{300000};

struct StoreServerOptions {
  std::string bind_addr = "0.0.0.0";
  int port = 0;           // 0 picks a free port; see StoreServer::port()
  std::string job_token;  // clients must present the same token ("" = none required)
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
  // How long to keep retrying (with backoff) to reach the server before failing with a message
  // that names host:port.
  std::chrono::milliseconds connect_timeout = kDefaultConnectTimeout;
};

// A blocking client. Thread-safe (calls are serialised on one connection).
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
