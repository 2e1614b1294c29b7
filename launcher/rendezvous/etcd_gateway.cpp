#include "rendezvous/etcd_gateway.hpp"

#include <algorithm>
#include <thread>

namespace dpl::rendezvous::etcd {
namespace {

constexpr std::chrono::milliseconds kFirstRoundBackoff{20};
constexpr std::chrono::milliseconds kMaxRoundBackoff{500};
// gRPC's codes in the gateway's error answers: the member could not serve the request now (no
// leader, stopping) or not within its own deadline (no quorum); either may still commit it.
constexpr int64_t kGrpcDeadlineExceeded = 4;
constexpr int64_t kGrpcUnavailable = 14;

}  // namespace

EtcdGateway::EtcdGateway(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {}

std::string EtcdGateway::Describe() const {
  std::string text = "etcd://";
  for (size_t i = 0; i < endpoints_.size(); ++i) text += (i ? "," : "") + endpoints_[i];
  return text;
}

void EtcdGateway::MoveOn() {
  connection_.reset();
  current_ = (current_ + 1) % endpoints_.size();
}

// One try of the current member. `*why` says what went wrong (naming the member), and starts
// with "!" when the member answered but not as etcd does.
EtcdGateway::Outcome EtcdGateway::TryCurrent(const std::string& path, const std::string& body,
                                             Clock::time_point deadline, Result<Json>* result,
                                             std::string* why) {
  const std::string& endpoint = endpoints_[current_];
  if (connection_ && !connection_->Usable()) connection_.reset();
  if (!connection_) {
    auto opened = HttpConnection::Open(endpoint, deadline);
    if (!opened.ok()) {
      *why = opened.status().message();
      return Outcome::kUnavailable;
    }
    connection_ = std::move(*opened);
  }
  Sent sent = Sent::kNo;
  auto reply = connection_->Post(path, body, deadline, &sent);
  if (!reply.ok()) {
    connection_.reset();
    *why = (reply.status().code() == DPL_ERR_INTERNAL ? "!" : "") + reply.status().message();
    return sent == Sent::kMaybe ? Outcome::kAmbiguous : Outcome::kUnavailable;
  }
  auto json = Json::Parse(reply->body);
  if (!json || json->type() != Json::Type::kObject) {
    *why = "!" + NotEtcd(endpoint, "answered HTTP " + std::to_string(reply->status) + " to " +
                                       path + " with something that is not etcd's JSON");
    return Outcome::kUnavailable;
  }
  if (reply->status == 200) {
    *result = std::move(*json);
    return Outcome::kAnswered;
  }
  const int64_t code = json->Integer("code", -1);
  *why = "etcd member " + endpoint + ": " +
         json->Text("message", json->Text("error", "HTTP " + std::to_string(reply->status)));
  if (code == kGrpcDeadlineExceeded || code == kGrpcUnavailable) return Outcome::kAmbiguous;
  *result = Status::Error(*why);
  return Outcome::kRefused;
}

Status EtcdGateway::Unreachable(const std::vector<std::string>& reasons, bool timed_out) const {
  std::string list;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    std::string reason = reasons[i].empty() ? "not tried before the deadline" : reasons[i];
    if (!reason.empty() && reason[0] == '!') reason.erase(0, 1);
    list += (i ? "; " : "") + reason;
  }
  const std::string message = "no member of the etcd cluster " + Describe() +
                              " could serve the request (" + list +
                              "); check that its members run, that a majority of them can reach "
                              "each other, and that --store lists their client URLs";
  return timed_out ? Status::Timeout(message) : Status::Error(message);
}

Result<Json> EtcdGateway::Call(const std::string& path, const std::string& body,
                               Clock::time_point deadline, Retry retry, bool* maybe_applied) {
  if (maybe_applied != nullptr) *maybe_applied = false;
  std::vector<std::string> reasons(endpoints_.size());
  auto backoff = kFirstRoundBackoff;
  for (;;) {
    size_t not_etcd = 0;
    for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
      Result<Json> result = Status::Error("no answer");
      std::string why;
      const Outcome outcome = TryCurrent(path, body, deadline, &result, &why);
      if (outcome == Outcome::kAnswered || outcome == Outcome::kRefused) return result;
      if (outcome == Outcome::kAmbiguous && retry == Retry::kOnlyUnsent) {
        if (maybe_applied != nullptr) *maybe_applied = true;
        return Status::Communication(why + " (the request may have been carried out)");
      }
      not_etcd += !why.empty() && why[0] == '!' ? 1 : 0;
      reasons[current_] = why;
      MoveOn();
      if (Clock::now() >= deadline) return Unreachable(reasons, true);
    }
    // Every member answered, none as etcd: waiting will not change that.
    if (not_etcd == endpoints_.size()) return Unreachable(reasons, false);
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return Unreachable(reasons, true);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, kMaxRoundBackoff);
  }
}

Result<std::unique_ptr<HttpConnection>> EtcdGateway::Stream(const std::string& path,
                                                            const std::string& body,
                                                            Clock::time_point deadline) {
  std::vector<std::string> reasons(endpoints_.size());
  auto backoff = kFirstRoundBackoff;
  for (;;) {
    for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
      auto opened = HttpConnection::Open(endpoints_[current_], deadline);
      if (opened.ok()) {
        auto status = (*opened)->StartStream(path, body, deadline);
        if (status.ok() && *status == 200) return std::move(*opened);
        reasons[current_] = status.ok()
                                ? NotEtcd(endpoints_[current_],
                                          "refused a watch with HTTP " + std::to_string(*status))
                                : status.status().message();
      } else {
        reasons[current_] = opened.status().message();
      }
      MoveOn();
      if (Clock::now() >= deadline) return Unreachable(reasons, true);
    }
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return Unreachable(reasons, true);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, kMaxRoundBackoff);
  }
}

}  // namespace dpl::rendezvous::etcd
