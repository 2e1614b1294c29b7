// Two network namespaces joined by a veth pair, as two machines with their own addresses, for the
// tests that need a real network between launchers (a partition, an address that only one machine
// can reach). Creating them needs root (CAP_SYS_ADMIN) and `ip`; CI runs these tests as root and
// they skip elsewhere.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dpl::test {

class NamespacePair {
 public:
  // Names from the process id and `tag` (distinct per test), addresses 10.233.<subnet>.1 and .2.
  NamespacePair(const std::string& tag, int subnet) {
    const std::string suffix = std::to_string(getpid() % 100000) + tag;
    names_[0] = "dplns-a-" + suffix;
    names_[1] = "dplns-b-" + suffix;
    links_[0] = "dpla" + suffix;
    links_[1] = "dplb" + suffix;
    addresses_[0] = "10.233." + std::to_string(subnet) + ".1";
    addresses_[1] = "10.233." + std::to_string(subnet) + ".2";
  }
  ~NamespacePair() {
    for (const auto& name : names_) Run("ip netns delete " + name);
  }
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;

  // "" when both namespaces are up and reach each other, else why not (the test skips).
  std::string Create() {
    if (!Run("ip netns add " + names_[0])) {
      return "cannot create network namespaces here (needs root/CAP_SYS_ADMIN and `ip`)";
    }
    const bool ready =
        Run("ip netns add " + names_[1]) &&
        Run("ip link add " + links_[0] + " netns " + names_[0] + " type veth peer name " +
            links_[1] + " netns " + names_[1]) &&
        Run("ip -n " + names_[0] + " addr add " + addresses_[0] + "/24 dev " + links_[0]) &&
        Run("ip -n " + names_[1] + " addr add " + addresses_[1] + "/24 dev " + links_[1]) &&
        Run("ip -n " + names_[0] + " link set " + links_[0] + " up") &&
        Run("ip -n " + names_[1] + " link set " + links_[1] + " up") &&
        Run("ip -n " + names_[0] + " link set lo up") &&
        Run("ip -n " + names_[1] + " link set lo up");
    return ready ? "" : "cannot set up a veth pair between network namespaces here";
  }

  // The command prefix that runs a program in namespace `index` (0 or 1).
  std::vector<std::string> Exec(int index) const { return {"ip", "netns", "exec", names_[index]}; }
  const std::string& Address(int index) const { return addresses_[index]; }

  // Takes machine 1's link down: from now on nothing passes between the namespaces and no
  // connection is closed (no FIN, no RST), as when its cable or switch fails.
  bool Cut() { return Run("ip -n " + names_[1] + " link set " + links_[1] + " down"); }

 private:
  static bool Run(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string names_[2], links_[2], addresses_[2];
};

}  // namespace dpl::test
