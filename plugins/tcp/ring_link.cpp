#include "ring_link.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace dpl::tcp_backend {
namespace {

using support::PluginError;

constexpr uint32_t kHandshakeMagic = 0x44504C54u;  // "TLPD"
constexpr int kSocketBufferBytes = 4 * 1024 * 1024;

void TuneStreamSocket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// Where the store holds the listening endpoint of `rank`.
std::string EndpointKey(int rank) {
  return "tcp/addr/" + std::to_string(rank);
}

// A listener on `address`, port chosen by the kernel; `*endpoint` is "address:port".
Socket ListenOn(const std::string& address, std::string* endpoint) {
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  if (listener.fd() < 0) throw PluginError(DPL_ERR_COMMUNICATION, "socket(): " + ErrnoText());
  sockaddr_in bind_address{};
  bind_address.sin_family = AF_INET;
  bind_address.sin_port = 0;
  if (::inet_pton(AF_INET, address.c_str(), &bind_address.sin_addr) != 1) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "address '" + address + "' is not an IPv4 address; pass address=<ip>");
  }
  if (::bind(listener.fd(), reinterpret_cast<sockaddr*>(&bind_address), sizeof(bind_address)) !=
          0 ||
      ::listen(listener.fd(), 4) != 0) {
    throw PluginError(DPL_ERR_COMMUNICATION, "cannot listen on " + address + ": " + ErrnoText() +
                                                 "; pass address=<an ip of this machine>");
  }
  socklen_t length = sizeof(bind_address);
  ::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&bind_address), &length);
  *endpoint = address + ":" + std::to_string(ntohs(bind_address.sin_port));
  return listener;
}

}  // namespace

std::string ErrnoText() {
  return std::strerror(errno);
}

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left, 1 << 30)));
}

void Socket::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

RingLink::RingLink(const dpl_backend_config_v2& config, const std::string& address)
    : config_(config) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  std::string endpoint;
  const Socket listener = ListenOn(address, &endpoint);
  PublishEndpoint(endpoint);
  ConnectNext(LookUpEndpoint(NextRank(), deadline), deadline);
  AcceptPrev(listener, endpoint, deadline);
}

void RingLink::ShutDown() const {
  ::shutdown(next_socket_.fd(), SHUT_RDWR);
  ::shutdown(prev_socket_.fd(), SHUT_RDWR);
}

void RingLink::PublishEndpoint(const std::string& endpoint) {
  const std::string my_key = EndpointKey(config_.rank);
  CheckStore(
      config_.store->set(config_.store->context, my_key.c_str(), endpoint.data(), endpoint.size()),
      "publish " + my_key);
}

std::string RingLink::LookUpEndpoint(int rank, Clock::time_point deadline) {
  const std::string key = EndpointKey(rank);
  char buffer[128] = {};
  uint64_t value_size = 0;
  CheckStore(config_.store->get(config_.store->context, key.c_str(), buffer, sizeof(buffer) - 1,
                                &value_size, RemainingMs(deadline)),
             "look up rank " + std::to_string(rank));
  return std::string(buffer, static_cast<size_t>(value_size));
}

// Connects to the next rank (retrying while it is not yet listening) and greets it.
void RingLink::ConnectNext(const std::string& next_endpoint, Clock::time_point deadline) {
  const int next = NextRank();
  const size_t colon = next_endpoint.rfind(':');
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<uint16_t>(std::stoi(next_endpoint.substr(colon + 1))));
  ::inet_pton(AF_INET, next_endpoint.substr(0, colon).c_str(), &peer.sin_addr);
  while (true) {
    Socket candidate(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(candidate.fd(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) == 0) {
      next_socket_ = std::move(candidate);
      break;
    }
    // The peer listens before it publishes its address, so a refusal there is final; on a
    // loopback address it means the peer runs on another machine and named the wrong one.
    if (errno == ECONNREFUSED && (ntohl(peer.sin_addr.s_addr) >> 24) == 127) {
      // Wrong options, not a lost peer (DPL_ERR_COMMUNICATION), so it reads as the root cause.
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "rank " + std::to_string(next) + " advertised the loopback address " +
                            next_endpoint +
                            ", which refuses connections here: it runs on another machine; "
                            "give every machine --backend-options address=<its ip>");
    }
    if (Clock::now() >= deadline) {
      throw PluginError(DPL_ERR_TIMEOUT, "cannot connect to rank " + std::to_string(next) + " at " +
                                             next_endpoint + ": " + ErrnoText());
    }
    ::usleep(10000);
  }
  TuneStreamSocket(next_socket_.fd());
  const uint32_t hello[2] = {kHandshakeMagic, static_cast<uint32_t>(config_.rank)};
  StepTransfer greeting;
  greeting.send_data = reinterpret_cast<const char*>(hello);
  greeting.send_bytes = sizeof(hello);
  RunStep(greeting, deadline, nullptr);  // no prev socket yet: send side only
}

// Accepts the previous rank on `listener` (at `endpoint`) and checks its greeting.
void RingLink::AcceptPrev(const Socket& listener, const std::string& endpoint,
                          Clock::time_point deadline) {
  const int prev = PrevRank();
  pollfd wait_for_peer{listener.fd(), POLLIN, 0};
  const int ready = ::poll(&wait_for_peer, 1, RemainingMs(deadline));
  if (ready <= 0) {
    throw PluginError(DPL_ERR_TIMEOUT, "rank " + std::to_string(prev) + " did not connect within " +
                                           std::to_string(config_.timeout_ms) + " ms");
  }
  prev_socket_ = Socket(::accept(listener.fd(), nullptr, nullptr));
  if (prev_socket_.fd() < 0) throw PluginError(DPL_ERR_COMMUNICATION, "accept(): " + ErrnoText());
  TuneStreamSocket(prev_socket_.fd());
  uint32_t peer_hello[2] = {};
  StepTransfer receive_greeting;
  receive_greeting.recv_data = reinterpret_cast<char*>(peer_hello);
  receive_greeting.recv_bytes = sizeof(peer_hello);
  RunStep(receive_greeting, deadline, nullptr);
  if (peer_hello[0] != kHandshakeMagic || peer_hello[1] != static_cast<uint32_t>(prev)) {
    throw PluginError(DPL_ERR_COMMUNICATION, "the connection accepted on " + endpoint +
                                                 " is not from rank " + std::to_string(prev) +
                                                 " of this job");
  }
}

void RingLink::CheckStore(dpl_status status, const std::string& what) {
  if (status == DPL_OK) return;
  const char* message = config_.store->last_error(config_.store->context);
  throw PluginError(status == DPL_ERR_TIMEOUT ? DPL_ERR_TIMEOUT : DPL_ERR_COMMUNICATION,
                    "store: cannot " + what + ": " + (message ? message : ""));
}

void RingLink::TimedOut(bool receiving) const {
  throw PluginError(DPL_ERR_TIMEOUT, "a peer did not answer within " +
                                         std::to_string(config_.timeout_ms) + " ms (rank " +
                                         std::to_string(config_.rank) + " waiting on " +
                                         (receiving ? "rank " + std::to_string(PrevRank())
                                                    : "rank " + std::to_string(NextRank())) +
                                         ")");
}

// One recv() of at most `bytes` (and kMaxBytesPerCall) from the previous rank, once poll() said
// it is readable: the bytes it got, 0 when none were ready.
size_t RingLink::ReceiveSome(char* data, size_t bytes) {
  const ssize_t got = ::recv(prev_socket_.fd(), data, std::min(bytes, kMaxBytesPerCall), 0);
  if (got == 0) {
    throw PluginError(DPL_ERR_COMMUNICATION,
                      "rank " + std::to_string(PrevRank()) +
                          " closed the connection mid-collective (did it exit?)");
  }
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    throw PluginError(DPL_ERR_COMMUNICATION,
                      "receive from rank " + std::to_string(PrevRank()) + ": " + ErrnoText());
  }
  return got > 0 ? static_cast<size_t>(got) : 0;
}

// One send() of at most `bytes` (and kMaxBytesPerCall) to the next rank, once poll() said it is
// writable: the bytes it took, 0 when none.
size_t RingLink::SendSome(const char* data, size_t bytes) {
  const ssize_t put =
      ::send(next_socket_.fd(), data, std::min(bytes, kMaxBytesPerCall), MSG_NOSIGNAL);
  if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    throw PluginError(DPL_ERR_COMMUNICATION,
                      "send to rank " + std::to_string(NextRank()) + ": " + ErrnoText());
  }
  return put > 0 ? static_cast<size_t>(put) : 0;
}

}  // namespace dpl::tcp_backend
