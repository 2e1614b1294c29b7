// The store on an etcd cluster (--store etcd://...): the StoreClient interface over the v3 JSON
// gateway of its members (etcd_gateway.hpp), so that the job's keys outlive any machine.
//
// Note [Keys of a job in etcd]
// A job's keys live under "/dpl/<job>/kv/", <job> a hash of the job token ("default" without
// one): jobs with different tokens share a cluster without seeing each other's keys, and the
// token itself is never written. Set is a put, Delete a delete-range. Get and Wait read their keys
// and, while one is missing, watch it from the revision of that read, so no put between the read
// and the watch is missed; the watch's member may die, and the next read goes to another. Add is
// a compare-and-swap in a transaction (the key's mod revision unchanged since it was read) that
// also records this client's id and the Add's sequence number under "/dpl/<job>/adds/<client>":
// an Add whose answer was lost with its member is looked up before it is tried again, so a
// counter never counts one Add twice (a barrier's count must be exact).
//
// Note [Leases of the etcd store]
// Every key carries a lease, so nothing of a job stays in etcd for ever:
//  - the job's lease (KeyLifetime::kJob, the default): the first client of the job grants it and
//    records it under "/dpl/<job>/lease"; every client, launcher or worker, renews it while it
//    lives. The keys stay while any process of the job lives, and vanish a TTL after the last
//    one stopped or lost the cluster. One lease for all, because a lease per machine would take
//    a counter or a member list with it when the machine that wrote it last went away.
//  - a client's own lease (KeyLifetime::kClient, the beat of a launcher, "job/alive/<id>"): the
//    keys it writes vanish when it is destroyed (the lease is revoked) or a TTL after its process
//    died.
// A lease that expired anyway (the cluster unreachable for a TTL) fails every later call.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/log.hpp"
#include "rendezvous/etcd_gateway.hpp"
#include "rendezvous/etcd_lease.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_common.hpp"

namespace dpl::rendezvous {
namespace {

using etcd::Clock;
using etcd::Json;
using etcd::Retry;

// A watch that broke at once (its member refuses) is not opened again at once.
constexpr std::chrono::milliseconds kWatchRetryPause{20};

std::string JobNamespace(const std::string& token) {
  if (token.empty()) return "default";
  uint64_t hash = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : token) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char text[32];
  std::snprintf(text, sizeof text, "job-%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string RandomClientId() {
  std::random_device random;
  char text[32];
  std::snprintf(text, sizeof text, "%08x%08x", random(), random());
  return text;
}

struct StoredKey {
  bool exists = false;
  std::string value;
  int64_t mod_revision = 0;
};

// The key a range answer holds, if any.
StoredKey FromRange(const Json& range) {
  StoredKey stored;
  const auto& kvs = range.Items("kvs");
  if (kvs.empty()) return stored;
  stored.exists = true;
  stored.value = etcd::Base64Decode(kvs[0].Text("value")).value_or("");
  stored.mod_revision = kvs[0].Integer("mod_revision");
  return stored;
}

std::string QuotedList(const std::vector<std::string>& keys) {
  std::string list;
  for (const auto& key : keys) list += (list.empty() ? "'" : ", '") + key + "'";
  return list;
}

class EtcdStoreClient final : public StoreClient {
 public:
  explicit EtcdStoreClient(StoreClientOptions options)
      : options_(std::move(options)),
        prefix_("/dpl/" + JobNamespace(options_.job_token) + "/"),
        client_id_(RandomClientId()),
        gateway_(options_.etcd_endpoints) {}

  Status Connect();

  Status Set(const std::string& key, const std::vector<uint8_t>& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DPL_RETURN_IF_ERROR(Usable());
    const std::string body = etcd::PutRequest(Full(key), {value.begin(), value.end()}, lease_id());
    return gateway_.Call("/v3/kv/put", body, CallDeadline(), Retry::kAlways)
        .status()
        .WithContext("set '" + key + "'");
  }

  Result<std::vector<uint8_t>> Get(const std::string& key,
                                   std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DPL_RETURN_IF_ERROR(Usable());
    DPL_ASSIGN_OR_RETURN(auto values, AwaitKeys({key}, timeout));
    return std::vector<uint8_t>(values.front().begin(), values.front().end());
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DPL_RETURN_IF_ERROR(Usable());
    return AwaitKeys(keys, timeout).status();
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DPL_RETURN_IF_ERROR(Usable());
    auto sum = AddLocked(key, delta);
    if (!sum.ok()) return sum.status().WithContext("add '" + key + "'");
    return sum;
  }

  Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DPL_RETURN_IF_ERROR(Usable());
    return gateway_
        .Call("/v3/kv/deleterange", "{" + etcd::KeyField(Full(key)) + "}", CallDeadline(),
              Retry::kAlways)
        .status()
        .WithContext("delete '" + key + "'");
  }

 private:
  Clock::time_point CallDeadline() const { return Clock::now() + options_.call_timeout; }
  std::string Full(const std::string& key) const { return prefix_ + "kv/" + key; }
  int64_t lease_id() const { return lease_->id(); }
  Status Usable() const {
    const std::string lost = lease_->Lost();
    return lost.empty() ? Status::Ok() : Status::Communication(lost);
  }

  Status ClearEndedJob(Clock::time_point deadline);
  Result<std::vector<StoredKey>> Read(const std::vector<std::string>& full_keys, int64_t* revision);
  Result<std::vector<std::string>> AwaitKeys(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout);
  Result<bool> WatchForPut(const std::string& full_key, int64_t from_revision,
                           Clock::time_point until);
  Result<int64_t> AddLocked(const std::string& key, int64_t delta);
  Result<bool> AddApplied(uint64_t sequence);

  StoreClientOptions options_;
  const std::string prefix_;     // "/dpl/<job>/"
  const std::string client_id_;  // this client's among the job's, for its Adds
  std::mutex mutex_;             // serialises the calls
  etcd::EtcdGateway gateway_;    // guarded by mutex_
  std::unique_ptr<etcd::EtcdLease> lease_;
  uint64_t add_sequence_ = 0;  // guarded by mutex_
};

// Note [A token used again]: a job's keys outlive it by the lease's time to live, and a launcher
// that connected within it adopted the ended job's lease (and renewed it, so the keys never went)
// and joined the ended job: a requeued preempted job failed with the old job's end, and a new
// job under a finished one's token exited 0 having trained nothing. A launcher that finds the
// end recorded revokes the lease the end key carries -- that job's, never a newer one -- once
// kEndReadGrace has passed (the ended job's coordinator gives its waiting launchers as long to
// read the end), and the new job starts on a lease of its own.
constexpr auto kEndReadGrace = std::chrono::milliseconds(2500);

Status EtcdStoreClient::ClearEndedJob(Clock::time_point deadline) {
  if (options_.ended_job_key.empty()) return Status::Ok();
  DPL_ASSIGN_OR_RETURN(
      auto answer,
      gateway_.Call("/v3/kv/range", "{" + etcd::KeyField(Full(options_.ended_job_key)) + "}",
                    deadline, Retry::kAlways));
  // A counter: its launchers read it (adding 0, which makes it) while the job runs.
  const auto& kvs = answer.Items("kvs");
  const auto count = kvs.empty() ? std::nullopt : etcd::Base64Decode(kvs[0].Text("value"));
  if (!count || std::atoll(count->c_str()) <= 0) return Status::Ok();
  const int64_t ended_lease = kvs[0].Integer("lease");
  if (ended_lease == 0) return Status::Ok();
  log::Info("the job under this --job-token in " + gateway_.Describe() +
            " has ended; its keys are cleared for this new job");
  std::this_thread::sleep_for(kEndReadGrace);
  // A lease already gone (another launcher of the new job revoked it) is what is wanted.
  (void)gateway_.Call("/v3/lease/revoke", "{\"ID\":\"" + std::to_string(ended_lease) + "\"}",
                      deadline, Retry::kAlways);
  return Status::Ok();
}

Status EtcdStoreClient::Connect() {
  const auto deadline = Clock::now() + options_.connect_timeout;
  DPL_RETURN_IF_ERROR(ClearEndedJob(deadline).WithContext("joining the job's store in " +
                                                          gateway_.Describe() + " (--store)"));
  const std::string shared_key =
      options_.key_lifetime == KeyLifetime::kJob ? prefix_ + "lease" : std::string();
  auto lease = etcd::EtcdLease::Obtain(options_.etcd_endpoints, shared_key, options_.etcd_lease_ttl,
                                       deadline);
  if (!lease.ok()) {
    return lease.status().WithContext("joining the job's store in " + gateway_.Describe() +
                                      " (--store)");
  }
  lease_ = std::move(*lease);
  return Status::Ok();
}

// The keys, read at one revision (returned in `*revision`).
Result<std::vector<StoredKey>> EtcdStoreClient::Read(const std::vector<std::string>& full_keys,
                                                     int64_t* revision) {
  std::string ranges;
  for (const auto& key : full_keys) {
    ranges += (ranges.empty() ? "" : ",") + std::string("{\"request_range\":{") +
              etcd::KeyField(key) + "}}";
  }
  DPL_ASSIGN_OR_RETURN(auto answer, gateway_.Call("/v3/kv/txn", "{\"success\":[" + ranges + "]}",
                                                  CallDeadline(), Retry::kAlways));
  const Json* header = answer.Find("header");
  *revision = header == nullptr ? 0 : header->Integer("revision");
  std::vector<StoredKey> stored;
  for (const Json& response : answer.Items("responses")) {
    const Json* range = response.Find("response_range");
    stored.push_back(range == nullptr ? StoredKey() : FromRange(*range));
  }
  if (stored.size() != full_keys.size()) {
    return Status::Error("etcd answered a read of " + std::to_string(full_keys.size()) +
                         " keys with " + std::to_string(stored.size()));
  }
  return stored;
}

// Every key's value once all exist, reading them again after each watched put.
Result<std::vector<std::string>> EtcdStoreClient::AwaitKeys(const std::vector<std::string>& keys,
                                                            std::chrono::milliseconds timeout) {
  const auto until =
      Clock::now() + std::clamp(timeout, std::chrono::milliseconds(0), kMaxStoreWait);
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(Full(key));
  for (;;) {
    int64_t revision = 0;
    auto stored = Read(full_keys, &revision);
    if (!stored.ok()) return stored.status().WithContext("reading " + QuotedList(keys));
    std::vector<std::string> values, missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      values.push_back((*stored)[i].value);
      if (!(*stored)[i].exists) missing.push_back(keys[i]);
    }
    if (missing.empty()) return values;
    if (Clock::now() >= until) {
      return Status::Timeout("timed out after " + SecondsText(timeout) +
                             " waiting for store key(s) " + QuotedList(missing));
    }
    const auto watch_start = Clock::now();
    auto watched = WatchForPut(Full(missing.front()), revision + 1, until);
    if (!watched.ok()) return watched.status().WithContext("waiting for '" + missing.front() + "'");
    if (!*watched && Clock::now() - watch_start < kWatchRetryPause) {
      std::this_thread::sleep_for(kWatchRetryPause);
    }
  }
}

// True once `full_key` was put at `from_revision` or later; false when `until` passed or the
// watch ended otherwise (its member died, the revision was compacted): the caller reads again.
Result<bool> EtcdStoreClient::WatchForPut(const std::string& full_key, int64_t from_revision,
                                          Clock::time_point until) {
  const std::string body = "{\"create_request\":{" + etcd::KeyField(full_key) +
                           ",\"start_revision\":\"" + std::to_string(from_revision) + "\"}}";
  DPL_ASSIGN_OR_RETURN(auto stream, gateway_.Stream("/v3/watch", body, CallDeadline()));
  for (;;) {
    auto line = stream->NextLine(until);
    if (!line.ok()) return false;
    const auto message = Json::Parse(*line);
    if (!message) continue;
    const Json* result = message->Find("result");
    if (result == nullptr || result->Bool("canceled") || result->Integer("compact_revision") > 0) {
      return false;
    }
    for (const Json& event : result->Items("events")) {
      if (event.Text("type") != "DELETE") return true;
    }
  }
}

Result<int64_t> EtcdStoreClient::AddLocked(const std::string& key, int64_t delta) {
  const std::string full_key = Full(key);
  const std::string marker_key = prefix_ + "adds/" + client_id_;
  for (;;) {
    int64_t revision = 0;
    DPL_ASSIGN_OR_RETURN(auto stored, Read({full_key}, &revision));
    const StoredKey& current = stored.front();
    char* end = nullptr;
    const long long value =
        current.value.empty() ? 0 : std::strtoll(current.value.c_str(), &end, 10);
    if (!current.value.empty() && (end == nullptr || *end != '\0')) {
      return Status::Error("refused by the etcd store: key '" + key +
                           "' holds a value that is not a counter");
    }
    if (delta == 0 && current.exists) return static_cast<int64_t>(value);
    const int64_t sum = static_cast<int64_t>(value) + delta;
    const uint64_t sequence = ++add_sequence_;
    const std::string compare =
        current.exists
            ? "\"target\":\"MOD\",\"mod_revision\":\"" + std::to_string(current.mod_revision) + "\""
            : std::string("\"target\":\"CREATE\",\"create_revision\":\"0\"");
    const std::string body =
        "{\"compare\":[{" + etcd::KeyField(full_key) + "," + compare +
        ",\"result\":\"EQUAL\"}],\"success\":[{\"request_put\":" +
        etcd::PutRequest(full_key, std::to_string(sum), lease_id()) +
        "},{\"request_put\":" + etcd::PutRequest(marker_key, std::to_string(sequence), lease_id()) +
        "}]}";
    bool maybe_applied = false;
    auto answer =
        gateway_.Call("/v3/kv/txn", body, CallDeadline(), Retry::kOnlyUnsent, &maybe_applied);
    if (answer.ok() && answer->Bool("succeeded")) return sum;
    if (!answer.ok() && !maybe_applied) return answer.status();
    if (!answer.ok()) {
      DPL_ASSIGN_OR_RETURN(auto applied, AddApplied(sequence));
      if (applied) return sum;
    }
    // Another client changed the counter since it was read, or the Add was lost: again.
  }
}

// Whether the Add numbered `sequence` of this client was carried out (Note [Keys of a job in
// etcd]).
Result<bool> EtcdStoreClient::AddApplied(uint64_t sequence) {
  int64_t revision = 0;
  DPL_ASSIGN_OR_RETURN(auto marker, Read({prefix_ + "adds/" + client_id_}, &revision));
  return marker.front().exists && marker.front().value == std::to_string(sequence);
}

}  // namespace

Result<std::unique_ptr<StoreClient>> ConnectEtcdStore(const StoreClientOptions& options) {
  if (options.etcd_endpoints.empty()) {
    return Status::InvalidArgument("the etcd store needs at least one member's client URL");
  }
  auto client = std::make_unique<EtcdStoreClient>(options);
  DPL_RETURN_IF_ERROR(client->Connect());
  return std::unique_ptr<StoreClient>(std::move(client));
}

}  // namespace dpl::rendezvous
