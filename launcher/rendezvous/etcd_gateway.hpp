// The members of an etcd cluster (--store etcd://A,B,C) as one service, spoken to through their v3
// JSON gateway (POST /v3/kv/range, /v3/kv/txn, /v3/lease/grant, /v3/watch, ...).
//
// Note [Failover across etcd members]
// etcd replicates every write to a quorum of its members before it answers, so any member that
// answers is as good as any other: a call goes to the member that answered last and moves on to
// the next one listed when that one cannot be reached, closes the connection, or answers that it
// cannot serve now (no leader, shutting down). A request that may already have been carried out
// (it left, then the connection broke) is sent again only when that is harmless (reads, puts,
// deletes, lease renewals); otherwise the caller learns that it may have been applied and finds
// out (EtcdStoreClient::Add). A member cut off from the quorum cannot answer writes or
// linearizable reads: its calls time out there and move on to the others, and a client that
// reaches no member of the quorum fails at its deadline, naming every endpoint and why.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "rendezvous/etcd_http.hpp"
#include "rendezvous/etcd_json.hpp"

namespace dpl::rendezvous::etcd {

// Request bodies: keys and values in base64, 64-bit numbers as strings.
inline std::string KeyField(const std::string& key) {
  return "\"key\":\"" + Base64Encode(key) + "\"";
}
// {"key": .., "value": .., "lease": ..}; lease 0 is none.
inline std::string PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  return "{" + KeyField(key) + ",\"value\":\"" + Base64Encode(value) + "\",\"lease\":\"" +
         std::to_string(lease) + "\"}";
}

// Whether a request that may have been carried out may be sent again (to another member).
enum class Retry { kAlways, kOnlyUnsent };

// Not thread-safe: each user keeps its own.
class EtcdGateway {
 public:
  explicit EtcdGateway(std::vector<std::string> endpoints);

  // POSTs `body` to `path` before `deadline`, moving from member to member (Note [Failover
  // across etcd members]), and returns the answer of the first that serves it. An answer of
  // etcd's refusing the request (a lease not found, a bad argument) is an error with etcd's
  // message. With Retry::kOnlyUnsent, a request that may have been carried out is not sent again:
  // the call fails and sets `*maybe_applied`.
  Result<Json> Call(const std::string& path, const std::string& body, Clock::time_point deadline,
                    Retry retry, bool* maybe_applied = nullptr);

  // A connection on which the member streams its answer to `body` at `path` (a watch); the
  // first member that takes it.
  Result<std::unique_ptr<HttpConnection>> Stream(const std::string& path, const std::string& body,
                                                 Clock::time_point deadline);

  // "etcd://A,B,C", for messages.
  std::string Describe() const;

 private:
  enum class Outcome { kAnswered, kRefused, kUnavailable, kAmbiguous };
  Outcome TryCurrent(const std::string& path, const std::string& body, Clock::time_point deadline,
                     Result<Json>* result, std::string* why);
  Status Unreachable(const std::vector<std::string>& reasons, bool timed_out) const;
  void MoveOn();

  std::vector<std::string> endpoints_;
  size_t current_ = 0;
  std::unique_ptr<HttpConnection> connection_;  // to endpoints_[current_], kept between calls
};

}  // namespace dpl::rendezvous::etcd
