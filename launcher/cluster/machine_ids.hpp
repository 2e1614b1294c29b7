// Whether a host names this machine, so that a launcher can tell it is machine 0 from the
// master's address alone (Slurm's first node, a hostfile's first host, MASTER_ADDR).
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

// True when `host` (a name or a numeric address) resolves (getaddrinfo) to a loopback address
// (127.0.0.0/8, ::1) or to an address of one of this machine's interfaces (getifaddrs), false
// when none of its addresses is. An IPv4-mapped IPv6 address counts as its IPv4 address; IPv6
// zones are ignored. A host that does not resolve is an error, not "elsewhere".
Result<bool> IsLocalAddress(const std::string& host);

// The addresses of this machine's interfaces, as text ("127.0.0.1", "fe80::1"), loopback ones
// included, each once.
Result<std::vector<std::string>> LocalInterfaceAddresses();

// The address of this machine's interface that routes to `host` (IPv4): the source address the
// kernel picks for a datagram there, which sends nothing. "" when `host` does not resolve or
// has no route. For `host` on this machine, the address itself (or 127.0.0.1 for loopback).
std::string SourceAddressTowards(const std::string& host);

// This machine as other machines' messages name it: "node7 10.0.0.7 pid 4242", its host name,
// the address that routes to `master_host` (which tells network namespaces of one host apart)
// and the launcher's pid (which tells apart launchers of one namespace).
std::string ThisMachineName(const std::string& master_host);

}  // namespace dpl::cluster
