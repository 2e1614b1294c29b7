#include "host_rendezvous.hpp"

#include <gloo/common/error.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "dpl/support/error.hpp"

namespace dpl::gloo_backend {

using support::PluginError;

void HostStore::set(const std::string& key, const std::vector<char>& data) {
  Check(store_->set(store_->context, Prefixed(key).c_str(), data.data(), data.size()), key);
}

std::vector<char> HostStore::get(const std::string& key) {
  std::vector<char> value(256);
  uint64_t size = 0;
  dpl_status status = store_->get(store_->context, Prefixed(key).c_str(), value.data(),
                                  value.size(), &size, timeout_.count());
  if (status == DPL_ERR_BUFFER_TOO_SMALL) {
    value.resize(static_cast<size_t>(size));
    status = store_->get(store_->context, Prefixed(key).c_str(), value.data(), value.size(), &size,
                         timeout_.count());
  }
  Check(status, key);
  value.resize(static_cast<size_t>(size));
  return value;
}

void HostStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> names;
  std::vector<const char*> pointers;
  for (const auto& key : keys) names.push_back(Prefixed(key));
  for (const auto& name : names) pointers.push_back(name.c_str());
  Check(store_->wait(store_->context, pointers.data(), static_cast<uint32_t>(pointers.size()),
                     timeout.count()),
        keys.empty() ? "" : keys.front());
}

void HostStore::Check(dpl_status status, const std::string& key) {
  if (status == DPL_OK) return;
  const char* message = store_->last_error(store_->context);
  throw PluginError(status == DPL_ERR_TIMEOUT ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION,
                    "store key '" + key + "': " + (message ? message : ""));
}

namespace {

// Note [Loopback refusals]: a rank that advertises a loopback address (address=127.0.0.1, or an
// interface= that has no other) is reachable from its own machine only: a peer on another machine
// that connects there reaches its own loopback, where nothing listens, and is refused. gloo says
// so only in text ("connect [127.0.0.1]:PORT: Connection refused"), so the address is read from
// that text, and the refusal is confirmed by connecting there once more and looking at errno, not
// at gloo's words.
std::optional<std::string> RefusedLoopbackPeer(const std::string& gloo_error) {
  const std::string marker = "connect [";
  const size_t begin = gloo_error.find(marker);
  if (begin == std::string::npos) return std::nullopt;
  const size_t host_begin = begin + marker.size();
  const size_t host_end = gloo_error.find("]:", host_begin);
  if (host_end == std::string::npos) return std::nullopt;
  const std::string host = gloo_error.substr(host_begin, host_end - host_begin);
  const long port = std::strtol(gloo_error.c_str() + host_end + 2, nullptr, 10);
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(port));
  if (port <= 0 || port > 65535 || ::inet_pton(AF_INET, host.c_str(), &peer.sin_addr) != 1 ||
      (ntohl(peer.sin_addr.s_addr) >> 24) != 127) {
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  const bool refused =
      ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) != 0 && errno == ECONNREFUSED;
  ::close(fd);
  if (!refused) return std::nullopt;
  return host + ":" + std::to_string(port);
}

}  // namespace

void ConnectFullMesh(gloo::rendezvous::Context& context, gloo::rendezvous::Store& store,
                     std::shared_ptr<gloo::transport::Device>& device) {
  try {
    context.connectFullMesh(store, device);
  } catch (const gloo::IoException& error) {
    const std::optional<std::string> peer = RefusedLoopbackPeer(error.what());
    if (!peer) throw;
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "a peer advertised the loopback address " + *peer +
                          ", which refuses connections here: that peer runs on another machine; "
                          "give every machine --backend-options address=<its ip> or "
                          "interface=<its network interface> (gloo: " +
                          error.what() + ")");
  }
}

}  // namespace dpl::gloo_backend
