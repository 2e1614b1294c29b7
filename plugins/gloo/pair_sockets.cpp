#include "pair_sockets.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace dpl::gloo_backend {
namespace {

bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port &&
           std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
  }
  return false;
}

// One pair's socket, as it is recognised (Note [Finding gloo's sockets]).
struct Wanted {
  int peer;
  sockaddr_storage local;  // the pair's address: its connected socket's local address
  int found = -1;          // our duplicate of that socket
};

// When `fd` is a connected socket whose local address is that of one of `wanted` not yet found,
// gives that one a duplicate of it.
void Match(int fd, std::vector<Wanted>* wanted) {
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return;
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return;
  sockaddr_storage local{}, peer{};
  socklen_t local_size = sizeof local, peer_size = sizeof peer;
  const bool connected =
      ::getsockname(copy, reinterpret_cast<sockaddr*>(&local), &local_size) == 0 &&
      ::getpeername(copy, reinterpret_cast<sockaddr*>(&peer), &peer_size) == 0;
  for (Wanted& pair : *wanted) {
    if (connected && pair.found < 0 && SameEndpoint(local, pair.local)) {
      pair.found = copy;
      return;
    }
  }
  ::close(copy);  // our own duplicate, of a descriptor that is not a pair's
}

}  // namespace

PairSockets::~PairSockets() {
  for (const int fd : fds_) ::close(fd);
}

std::vector<int> PairSockets::Add(gloo::Context& context) {
  std::vector<Wanted> wanted;
  for (int peer = 0; peer < context.size; ++peer) {
    if (peer == context.rank || !context.getPair(peer)) continue;
    // The plugin connects every mesh through a tcp device, whose pairs have tcp addresses.
    const auto& address =
        static_cast<const gloo::transport::tcp::Address&>(context.getPair(peer)->address());
    wanted.push_back({peer, address.getSockaddr()});
  }
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir("/proc/self/fd"), ::closedir);
  while (listing && !wanted.empty()) {
    const dirent* entry = ::readdir(listing.get());
    if (entry == nullptr) break;
    const int fd = std::atoi(entry->d_name);
    if (entry->d_name[0] == '.' || fd == ::dirfd(listing.get())) continue;
    Match(fd, &wanted);
  }
  std::vector<int> missing;
  for (const Wanted& pair : wanted) {
    if (pair.found >= 0) {
      fds_.push_back(pair.found);
    } else {
      missing.push_back(pair.peer);
    }
  }
  return missing;
}

void PairSockets::ShutDown() const {
  for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace dpl::gloo_backend
