// What the store's server and client share beyond the wire protocol: how a connection's socket is
// set up, with TCP keepalive (Note [Deadlines and dead peers] in store_server.cpp), and how
// messages write a duration.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace dpl::rendezvous {

// Longer gets and waits are cut to this, on both ends, which keeps a deadline's time point in
// range.
inline constexpr std::chrono::milliseconds kMaxStoreWait{std::chrono::hours(24 * 365)};

// A peer whose kernel stops answering (machine down, network cut) fails the connection after
// about `timeout`, even an idle one: keepalive probes start after half of it without traffic, and
// TCP_USER_TIMEOUT ends the connection once the peer has been silent, or has left sent data
// unacknowledged, for all of it. Reads and writes then fail with ETIMEDOUT. Whole seconds, at
// least 3 s. Best effort: a platform without an option keeps its default.
inline void EnableKeepalive(int fd, std::chrono::milliseconds timeout) {
  constexpr int kMinSeconds = 3;
  constexpr int kProbes = 3;  // spread over the second half
  const int total = std::max<int>(
      kMinSeconds,
      static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
  const int idle = total / 2;
  const int interval = std::max(1, (total - idle) / kProbes);
  const unsigned int user_timeout_ms = static_cast<unsigned int>(total) * 1000u;
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kProbes, sizeof kProbes);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

// Both ends of a store connection: no Nagle delay (requests and replies are small and alternate),
// keepalive after `keepalive_timeout` (EnableKeepalive), and closed at exec: a worker started by
// a launcher never holds the launcher's connections (Note [Only the launcher listens] in
// store_server.cpp). Best effort, as EnableKeepalive.
inline void PrepareStoreConnection(int fd, std::chrono::milliseconds keepalive_timeout) {
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  EnableKeepalive(fd, keepalive_timeout);
}

// "0.5 s", "300 s".
inline std::string SecondsText(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

}  // namespace dpl::rendezvous
