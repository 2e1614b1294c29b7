// The tcp backend's ring: a rank's connection to the next rank and the one from the previous
// rank, and one ring step's traffic driven over both at once.
//
// Note [Ring without deadlock]: every step of a ring collective sends to the next rank while
// receiving from the previous one. With blocking sockets both sides of a pair could block in
// send() once the kernel buffers fill; here both directions are driven by one poll() loop, so a
// step progresses whichever side is ready, and a deadline bounds the whole step.
#pragma once

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <string>

#include "dpl/backend_v2.h"
#include "dpl/support/error.hpp"

namespace dpl::tcp_backend {

using Clock = std::chrono::steady_clock;

// Note [Sending in step with receiving]: a ring step sends at most kLeadBytes ahead of what it
// has received, and one send() or recv() moves at most kMaxBytesPerCall. Without these a call
// copied whatever the 4 MiB socket buffers allowed, one direction ran megabytes ahead of the
// other, and the bytes in flight outgrew the caches (the effect on 16-64 MiB allreduces is in
// docs/bandwidth.md, "Third run"). It cannot deadlock: were every rank held
// by the lead, each would have received exactly kLeadBytes more than its predecessor around the
// ring, which is impossible; a rank whose receive is complete is no longer held.
constexpr size_t kMaxBytesPerCall = 256 * 1024;
constexpr size_t kLeadBytes = 512 * 1024;

// The text of errno.
std::string ErrnoText();
// Milliseconds from now to `deadline`, at least 0 (what poll() takes).
int RemainingMs(Clock::time_point deadline);

// A file descriptor that is closed with its owner.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  ~Socket() { Reset(); }
  void Reset();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// One ring step's traffic: `send_bytes` to the next rank, `recv_bytes` from the previous.
struct StepTransfer {
  const char* send_data = nullptr;
  size_t send_bytes = 0;
  char* recv_data = nullptr;
  size_t recv_bytes = 0;
  // Broadcast forwarding: the send side may only send what has been received so far.
  bool send_only_received = false;
};

class RingLink {
 public:
  // Connects this rank of `config` (world size > 1) into the ring: it listens on `address`,
  // publishes where in the config's store, connects to the next rank and accepts the previous
  // one; a greeting on each connection proves it joins the right ranks of this job.
  RingLink(const dpl_backend_config_v2& config, const std::string& address);

  // Drives one ring step until both directions are done (Note [Ring without deadlock]).
  // `on_received(begin, end)` is called with the byte range of recv_data that arrived since the
  // last call.
  template <typename OnReceived>
  void RunStep(const StepTransfer& transfer, Clock::time_point deadline, OnReceived* on_received);
  void RunStep(const StepTransfer& transfer, Clock::time_point deadline, std::nullptr_t) {
    RunStep<void (*)(size_t, size_t)>(transfer, deadline, nullptr);
  }

  // Shuts both connections down (abort, from any thread): a poll() waiting on them returns and
  // their recv() and send() fail, so a step under way ends at once. The descriptors stay open
  // until the link is destroyed, so no other socket of the process can take their numbers while
  // the step still uses them.
  void ShutDown() const;

  int NextRank() const { return (config_.rank + 1) % config_.world_size; }
  int PrevRank() const { return (config_.rank + config_.world_size - 1) % config_.world_size; }

 private:
  void PublishEndpoint(const std::string& endpoint);
  std::string LookUpEndpoint(int rank, Clock::time_point deadline);
  void ConnectNext(const std::string& next_endpoint, Clock::time_point deadline);
  void AcceptPrev(const Socket& listener, const std::string& endpoint, Clock::time_point deadline);
  void CheckStore(dpl_status status, const std::string& what);
  // The error of a step that waited in vain on the previous rank (`receiving`) or the next one.
  [[noreturn]] void TimedOut(bool receiving) const;
  size_t ReceiveSome(char* data, size_t bytes);
  size_t SendSome(const char* data, size_t bytes);

  dpl_backend_config_v2 config_;
  Socket next_socket_;
  Socket prev_socket_;
};

template <typename OnReceived>
void RingLink::RunStep(const StepTransfer& transfer, Clock::time_point deadline,
                       OnReceived* on_received) {
  size_t sent = 0;
  size_t received = 0;
  while (sent < transfer.send_bytes || received < transfer.recv_bytes) {
    pollfd fds[2];
    nfds_t count = 0;
    int send_index = -1;
    int recv_index = -1;
    size_t sendable = transfer.send_only_received ? received : transfer.send_bytes;
    if (received < transfer.recv_bytes) sendable = std::min(sendable, received + kLeadBytes);
    if (sent < sendable) {
      send_index = static_cast<int>(count);
      fds[count++] = {next_socket_.fd(), POLLOUT, 0};
    }
    if (received < transfer.recv_bytes) {
      recv_index = static_cast<int>(count);
      fds[count++] = {prev_socket_.fd(), POLLIN, 0};
    }
    const int ready = ::poll(fds, count, RemainingMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw support::PluginError(DPL_ERR_COMMUNICATION, "poll(): " + ErrnoText());
    if (ready == 0) TimedOut(recv_index >= 0);
    if (recv_index >= 0 && fds[recv_index].revents != 0) {
      const size_t before = received;
      received += ReceiveSome(transfer.recv_data + received, transfer.recv_bytes - received);
      if (received > before && on_received != nullptr) (*on_received)(before, received);
    }
    if (send_index >= 0 && fds[send_index].revents != 0) {
      sent += SendSome(transfer.send_data + sent, sendable - sent);
    }
  }
}

}  // namespace dpl::tcp_backend
