#include "rendezvous/store_location.hpp"

#include "rendezvous/store.hpp"
#include "rendezvous/store_common.hpp"

namespace dpl::rendezvous {
namespace {

constexpr const char* kEtcdScheme = "etcd://";
constexpr const char* kForm =
    "give etcd://HOST:PORT[,HOST:PORT...] (the client URLs of an etcd cluster's members), or "
    "leave --store out for the built-in store of machine 0";

// "" when `endpoint` is HOST:PORT with a port in 1..65535, else what is wrong with it.
std::string CheckEndpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.empty()) return "an empty member";
  if (colon == std::string::npos || colon == 0) return "member '" + endpoint + "' is not HOST:PORT";
  const std::string port = endpoint.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
      std::stoi(port) > 65535) {
    return "member '" + endpoint + "' has no port in 1..65535";
  }
  if (endpoint.find('/') != std::string::npos) {
    return "member '" + endpoint + "' has a path; give HOST:PORT only";
  }
  return "";
}

}  // namespace

std::string StoreLocation::Describe() const {
  if (builtin()) return "the built-in store of machine 0";
  std::string text = "the etcd cluster etcd://";
  for (size_t i = 0; i < etcd_endpoints.size(); ++i) text += (i ? "," : "") + etcd_endpoints[i];
  return text;
}

Result<StoreLocation> ParseStoreLocation(const std::string& text) {
  StoreLocation location;
  if (text.empty()) return location;
  const std::string scheme = kEtcdScheme;
  if (text.compare(0, scheme.size(), scheme) != 0) {
    return Status::InvalidArgument("--store '" + text + "' is not a store: " + kForm);
  }
  const std::string list = text.substr(scheme.size());
  if (list.empty()) {
    return Status::InvalidArgument("--store '" + text + "' names no etcd member: " + kForm);
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    const std::string endpoint = list.substr(start, comma - start);
    const std::string problem = CheckEndpoint(endpoint);
    if (!problem.empty()) {
      return Status::InvalidArgument("--store '" + text + "': " + problem + "; " + kForm);
    }
    location.etcd_endpoints.push_back(endpoint);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return location;
}

Status RefuseEarlierJob(StoreClient& client, const StoreLocation& location) {
  if (location.builtin()) return Status::Ok();
  // Machine 0 publishes "job/settings" first of all (join.hpp).
  auto earlier = client.Get("job/settings", std::chrono::milliseconds(0));
  if (earlier.ok()) {
    return Status::Error(location.Describe() +
                         " holds the keys of another job with this --job-token (one that " +
                         "still runs, or ended less than " + SecondsText(kDefaultEtcdLeaseTtl) +
                         " ago): give this job a --job-token of its own, or wait that long");
  }
  return earlier.status().IsTimeout() ? Status::Ok() : earlier.status();
}

Result<std::unique_ptr<StoreClient>> StoreClient::Connect(const StoreClientOptions& options) {
  return options.etcd_endpoints.empty() ? ConnectBuiltinStore(options) : ConnectEtcdStore(options);
}

}  // namespace dpl::rendezvous
