#include "cluster/machine_ids.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

namespace dpl::cluster {
namespace {

// An address without port or zone, IPv4-mapped IPv6 addresses turned into IPv4.
struct Address {
  int family = AF_UNSPEC;
  std::array<unsigned char, 16> bytes{};
  bool operator==(const Address& other) const {
    return family == other.family && bytes == other.bytes;
  }
};

std::optional<Address> FromSockaddr(const sockaddr* socket_address) {
  if (socket_address == nullptr) return std::nullopt;
  Address address;
  if (socket_address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(socket_address);
    address.family = AF_INET;
    std::memcpy(address.bytes.data(), &v4->sin_addr, 4);
    return address;
  }
  if (socket_address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(socket_address);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      address.family = AF_INET;
      std::memcpy(address.bytes.data(), v6->sin6_addr.s6_addr + 12, 4);
    } else {
      address.family = AF_INET6;
      std::memcpy(address.bytes.data(), v6->sin6_addr.s6_addr, 16);
    }
    return address;
  }
  return std::nullopt;
}

bool IsLoopback(const Address& address) {
  if (address.family == AF_INET) return address.bytes[0] == 127;
  static const std::array<unsigned char, 16> kIpv6Loopback = {0, 0, 0, 0, 0, 0, 0, 0,
                                                              0, 0, 0, 0, 0, 0, 0, 1};
  return address.family == AF_INET6 && address.bytes == kIpv6Loopback;
}

std::string ToText(const Address& address) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(address.family, address.bytes.data(), text, sizeof(text));
  return text;
}

Result<std::vector<Address>> InterfaceAddresses() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Status::Io(std::string("cannot list this machine's addresses (getifaddrs): ") +
                      std::strerror(errno));
  }
  std::vector<Address> addresses;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    const std::optional<Address> address = FromSockaddr(entry->ifa_addr);
    if (address && std::find(addresses.begin(), addresses.end(), *address) == addresses.end()) {
      addresses.push_back(*address);
    }
  }
  freeifaddrs(list);
  return addresses;
}

Result<std::vector<Address>> Resolve(const std::string& host) {
  if (host.empty()) return Status::InvalidArgument("an empty host name names no machine");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  const int error = getaddrinfo(host.c_str(), nullptr, &hints, &results);
  if (error != 0) {
    return Status::Communication("cannot resolve host '" + host + "': " + gai_strerror(error));
  }
  std::vector<Address> addresses;
  for (const addrinfo* result = results; result != nullptr; result = result->ai_next) {
    if (const std::optional<Address> address = FromSockaddr(result->ai_addr)) {
      addresses.push_back(*address);
    }
  }
  freeaddrinfo(results);
  return addresses;
}

}  // namespace

Result<bool> IsLocalAddress(const std::string& host) {
  DPL_ASSIGN_OR_RETURN(auto resolved, Resolve(host));
  if (std::any_of(resolved.begin(), resolved.end(), IsLoopback)) return true;
  DPL_ASSIGN_OR_RETURN(auto local, InterfaceAddresses());
  for (const Address& address : resolved) {
    if (std::find(local.begin(), local.end(), address) != local.end()) return true;
  }
  return false;
}

Result<std::vector<std::string>> LocalInterfaceAddresses() {
  DPL_ASSIGN_OR_RETURN(auto local, InterfaceAddresses());
  std::vector<std::string> texts;
  for (const Address& address : local) texts.push_back(ToText(address));
  return texts;
}

std::string SourceAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "";
  std::string address;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr) {
      address = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

std::string ThisMachineName(const std::string& master_host) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "?");
  std::string address = SourceAddressTowards(master_host);
  return std::string(name) + (address.empty() ? "" : " " + address) + " pid " +
         std::to_string(getpid());
}

}  // namespace dpl::cluster
