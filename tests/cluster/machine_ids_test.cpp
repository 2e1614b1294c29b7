// Whether a host is this machine, on the machine's real interfaces and resolver.
#include "cluster/machine_ids.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

namespace dpl::cluster {
namespace {

bool Local(const std::string& host) {
  auto local = IsLocalAddress(host);
  EXPECT_TRUE(local.ok()) << host << ": " << local.status().message();
  return local.ok() && *local;
}

std::vector<std::string> InterfaceAddresses() {
  auto addresses = LocalInterfaceAddresses();
  EXPECT_TRUE(addresses.ok()) << addresses.status().message();
  return addresses.ok() ? *addresses : std::vector<std::string>{};
}

TEST(MachineIdsTest, LoopbackIsLocal) {
  EXPECT_TRUE(Local("127.0.0.1"));
  EXPECT_TRUE(Local("127.3.2.1"));  // all of 127.0.0.0/8
  EXPECT_TRUE(Local("localhost"));
  EXPECT_TRUE(Local("::1"));
  EXPECT_TRUE(Local("::ffff:127.0.0.1"));
}

TEST(MachineIdsTest, OwnHostnameIsLocal) {
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(Local(name)) << name;
}

TEST(MachineIdsTest, InterfaceAddressesAreLocal) {
  const std::vector<std::string> addresses = InterfaceAddresses();
  EXPECT_NE(std::find(addresses.begin(), addresses.end(), "127.0.0.1"), addresses.end());
  int checked = 0;
  for (const std::string& address : addresses) {
    if (address.rfind("127.", 0) == 0 || address == "::1") continue;
    EXPECT_TRUE(Local(address)) << address;  // found through getifaddrs, not the loopback rule
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "this machine has only loopback addresses";
}

TEST(MachineIdsTest, TestNetAddressIsNotLocal) {
  const std::vector<std::string> addresses = InterfaceAddresses();
  ASSERT_EQ(std::find(addresses.begin(), addresses.end(), "192.0.2.1"), addresses.end())
      << "this machine holds 192.0.2.1 itself";
  auto local = IsLocalAddress("192.0.2.1");
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_FALSE(*local);
  local = IsLocalAddress("2001:db8::1");
  ASSERT_TRUE(local.ok()) << local.status().message();
  EXPECT_FALSE(*local);
}

TEST(MachineIdsTest, UnresolvableHostsAreErrors) {
  auto local = IsLocalAddress("");
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(local.status().message(), "an empty host name names no machine");
  local = IsLocalAddress("no-such-host.invalid");  // .invalid never resolves (RFC 6761)
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), DPL_ERR_COMMUNICATION);
  EXPECT_EQ(local.status().message().rfind("cannot resolve host 'no-such-host.invalid': ", 0), 0u)
      << local.status().message();
}

}  // namespace
}  // namespace dpl::cluster
