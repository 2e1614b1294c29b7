#include "rendezvous/etcd_lease.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>

namespace dpl::rendezvous::etcd {
namespace {

// A lease is renewed three times per TTL, so one lost renewal never lets it lapse.
constexpr int kRenewalsPerTtl = 3;
constexpr std::chrono::milliseconds kMinRenewInterval{100};
// After a failed renewal (no member reachable) the next try comes sooner.
constexpr std::chrono::milliseconds kRenewRetry{200};
constexpr std::chrono::milliseconds kRevokeTimeout{1000};

std::string IdText(int64_t id) {
  return "\"" + std::to_string(id) + "\"";
}

}  // namespace

Result<std::unique_ptr<EtcdLease>> EtcdLease::Obtain(const std::vector<std::string>& endpoints,
                                                     const std::string& shared_key,
                                                     std::chrono::milliseconds ttl,
                                                     Clock::time_point deadline) {
  const auto seconds = std::max<std::chrono::seconds>(std::chrono::seconds(1),
                                                      std::chrono::ceil<std::chrono::seconds>(ttl));
  std::unique_ptr<EtcdLease> lease(new EtcdLease(endpoints, !shared_key.empty(), seconds));
  if (shared_key.empty()) {
    DPL_ASSIGN_OR_RETURN(lease->id_, lease->Grant(deadline));
  } else {
    DPL_RETURN_IF_ERROR(lease->AdoptOrCreate(shared_key, deadline));
  }
  EtcdLease* self = lease.get();
  lease->thread_ = std::thread([self] { self->RenewLoop(); });
  return lease;
}

EtcdLease::~EtcdLease() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!shared_ && id_ != 0) {
    (void)gateway_.Call("/v3/lease/revoke", "{\"ID\":" + IdText(id_) + "}",
                        Clock::now() + kRevokeTimeout, Retry::kAlways);
  }
}

std::string EtcdLease::Lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lost_;
}

Result<int64_t> EtcdLease::Grant(Clock::time_point deadline) {
  // A grant sent twice leaves a spare lease, which expires unused.
  DPL_ASSIGN_OR_RETURN(auto answer, gateway_.Call("/v3/lease/grant",
                                                  "{\"TTL\":" + std::to_string(ttl_.count()) + "}",
                                                  deadline, Retry::kAlways));
  const int64_t id = answer.Integer("ID");
  if (id == 0) return Status::Error("etcd granted no lease: " + answer.Text("error"));
  return id;
}

Result<int64_t> EtcdLease::Renew(int64_t id, Clock::time_point deadline) {
  DPL_ASSIGN_OR_RETURN(auto answer,
                       gateway_.Call("/v3/lease/keepalive", "{\"ID\":" + IdText(id) + "}", deadline,
                                     Retry::kAlways));
  // A stream's answer: {"result": {...}}, or {"error": {...}} when the member could not renew
  // it now (no leader): only a result without a TTL says that the lease is gone.
  const Json* result = answer.Find("result");
  if (result == nullptr) {
    const Json* error = answer.Find("error");
    return Status::Communication(
        "renewing the lease in " + gateway_.Describe() + ": " +
        (error == nullptr ? std::string("no answer") : error->Text("message", "no answer")));
  }
  return result->Integer("TTL");
}

// The first client of a job records its lease under `shared_key` (itself under that lease, so
// it vanishes with it); every later one renews the lease recorded there.
Status EtcdLease::AdoptOrCreate(const std::string& shared_key, Clock::time_point deadline) {
  const std::string key = Base64Encode(shared_key);
  for (;;) {
    DPL_ASSIGN_OR_RETURN(auto granted, Grant(deadline));
    const std::string body =
        "{\"compare\":[{\"key\":\"" + key +
        "\",\"target\":\"CREATE\",\"create_revision\":\"0\",\"result\":\"EQUAL\"}],"
        "\"success\":[{\"request_put\":" +
        PutRequest(shared_key, std::to_string(granted), granted) +
        "}],\"failure\":[{\"request_range\":{\"key\":\"" + key + "\"}}]}";
    DPL_ASSIGN_OR_RETURN(auto answer, gateway_.Call("/v3/kv/txn", body, deadline, Retry::kAlways));
    int64_t recorded = granted;
    if (!answer.Bool("succeeded")) {
      const auto& responses = answer.Items("responses");
      const Json* range = responses.empty() ? nullptr : responses[0].Find("response_range");
      const auto& kvs = range == nullptr ? responses : range->Items("kvs");
      const auto text = kvs.empty() ? std::nullopt : Base64Decode(kvs[0].Text("value"));
      recorded = text ? std::atoll(text->c_str()) : 0;
    }
    if (recorded == granted) {  // ours (also when a retried txn finds its own first try)
      id_ = recorded;
      return Status::Ok();
    }
    (void)gateway_.Call("/v3/lease/revoke", "{\"ID\":" + IdText(granted) + "}", deadline,
                        Retry::kAlways);
    DPL_ASSIGN_OR_RETURN(auto remaining,
                         recorded == 0 ? Result<int64_t>(0) : Renew(recorded, deadline));
    if (remaining > 0) {
      id_ = recorded;
      return Status::Ok();
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout("the job's lease in " + gateway_.Describe() +
                             " expired each time it was found; is another job with this "
                             "--job-token ending?");
    }
    // The lease recorded there expired just now: its key goes with it; try again.
  }
}

void EtcdLease::RenewLoop() {
  const auto interval = std::max<std::chrono::milliseconds>(
      kMinRenewInterval,
      std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / kRenewalsPerTtl);
  std::unique_lock<std::mutex> lock(mutex_);
  auto next = Clock::now() + interval;
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    auto remaining = Renew(id_, Clock::now() + interval);
    lock.lock();
    if (remaining.ok() && *remaining <= 0) {
      lost_ = (shared_ ? "the job's keys in " + gateway_.Describe() +
                             " expired with their lease: no process of the job renewed it for " +
                             std::to_string(ttl_.count()) +
                             " s (every launcher stopped, or none could reach the cluster)"
                       : "this machine's lease in " + gateway_.Describe() +
                             " expired: it was "
                             "not renewed for " +
                             std::to_string(ttl_.count()) + " s");
      return;
    }
    next = Clock::now() + (remaining.ok() ? interval : kRenewRetry);
  }
}

}  // namespace dpl::rendezvous::etcd
