// Several network namespaces as machines, each joined to each other by a veth pair of its own (a
// full mesh), so that one pair can be slowed (tc) without touching the others. Every namespace
// has one address, 10.234.<subnet>.<i+1>, on its loopback, reached from each other namespace by
// a host route over their pair. Needs root (CAP_SYS_ADMIN), `ip` and `tc`; the tests skip
// elsewhere.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace dpl::test {

class NamespaceMesh {
 public:
  // `count` namespaces, named from the process id and `tag` (distinct per test).
  NamespaceMesh(const std::string& tag, int count, int subnet) : count_(count) {
    suffix_ = std::to_string(getpid() % 10000) + tag;
    for (int i = 0; i < count; ++i) {
      names_.push_back("dplmesh-" + suffix_ + "-" + std::to_string(i));
      addresses_.push_back("10.234." + std::to_string(subnet) + "." + std::to_string(i + 1));
    }
  }
  ~NamespaceMesh() {
    for (const auto& name : names_) Run("ip netns delete " + name);
  }
  NamespaceMesh(const NamespaceMesh&) = delete;
  NamespaceMesh& operator=(const NamespaceMesh&) = delete;

  // "" when every namespace is up and reaches every other, else why not (the test skips).
  std::string Create() {
    for (int i = 0; i < count_; ++i) {
      if (!Run("ip netns add " + names_[i])) {
        return "cannot create network namespaces here (needs root/CAP_SYS_ADMIN and `ip`)";
      }
      if (!In(i, "ip link set lo up") || !In(i, "ip addr add " + addresses_[i] + "/32 dev lo")) {
        return "cannot set up the loopback of a network namespace here";
      }
    }
    for (int i = 0; i < count_; ++i) {
      for (int j = i + 1; j < count_; ++j) {
        if (!Join(i, j)) return "cannot set up a veth pair between network namespaces here";
      }
    }
    return "";
  }

  // Slows the pair between namespaces `i` and `j`, both ways: `netem` (e.g. "delay 20ms rate
  // 20mbit") where the kernel has netem, else the token bucket `tbf` (e.g. "rate 20mbit burst
  // 32kb latency 400ms"), which limits the rate alone. Returns the qdisc used, "" when neither.
  std::string Slow(int i, int j, const std::string& netem, const std::string& tbf) {
    for (const auto& [kind, parameters] : {std::make_pair("netem", netem), {"tbf", tbf}}) {
      if (In(i, "tc qdisc add dev " + Link(i, j) + " root " + kind + " " + parameters) &&
          In(j, "tc qdisc add dev " + Link(j, i) + " root " + kind + " " + parameters)) {
        return kind;
      }
      In(i, "tc qdisc del dev " + Link(i, j) + " root");
    }
    return "";
  }

  // The command prefix that runs a program in namespace `index`.
  std::vector<std::string> Exec(int index) const { return {"ip", "netns", "exec", names_[index]}; }
  const std::string& Address(int index) const { return addresses_[index]; }

 private:
  // Namespace i's end of the pair to namespace j (at most 15 characters).
  std::string Link(int i, int j) const {
    return "dm" + suffix_ + "-" + std::to_string(i) + std::to_string(j);
  }
  bool Join(int i, int j) {
    return Run("ip link add " + Link(i, j) + " netns " + names_[i] + " type veth peer name " +
               Link(j, i) + " netns " + names_[j]) &&
           In(i, "ip link set " + Link(i, j) + " up") &&
           In(j, "ip link set " + Link(j, i) + " up") &&
           In(i, "ip route add " + addresses_[j] + "/32 dev " + Link(i, j) + " src " +
                     addresses_[i]) &&
           In(j,
              "ip route add " + addresses_[i] + "/32 dev " + Link(j, i) + " src " + addresses_[j]);
  }
  bool In(int index, const std::string& command) const {
    return Run("ip netns exec " + names_[index] + " " + command);
  }
  static bool Run(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  }

  int count_;
  std::string suffix_;
  std::vector<std::string> names_, addresses_;
};

}  // namespace dpl::test
