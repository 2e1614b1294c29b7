// A real etcd cluster for the tests of the etcd store: N members (`etcd` processes of Debian's
// etcd-server) on loopback ports, each with a data folder of its own, started by the test and
// killed when it ends. Tests skip with a message when etcd is not installed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dpl::rendezvous::testing {

// The message a test skips with when etcd is not installed.
inline constexpr const char* kNoEtcd =
    "etcd is not installed (Debian's etcd-server; tools/setup.sh installs it): skipping the "
    "etcd store's tests";

class EtcdCluster {
 public:
  // Whether an `etcd` executable is on the PATH.
  static bool Installed();

  // Starts `members` members and waits until the cluster has a leader and serves reads. Their
  // data lives under `data_parent` (memory, by default, so that etcd's fsyncs cost little; /tmp
  // when that cannot be written).
  explicit EtcdCluster(int members, const std::string& data_parent = "/dev/shm");
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  bool started() const { return error_.empty(); }
  // Why the cluster did not start (with the members' logs).
  const std::string& error() const { return error_; }

  // Every member's client URL as "127.0.0.1:port", in member order.
  std::vector<std::string> Endpoints() const;
  // "etcd://127.0.0.1:a,127.0.0.1:b,...", the value of --store.
  std::string Url() const;
  pid_t pid(int member) const { return members_[static_cast<size_t>(member)].pid; }
  // SIGKILL to one member, returning once it is gone.
  void Kill(int member);
  // SIGSTOP to one member, returning once it has stopped: the signal arrives asynchronously, and
  // a member still running for a moment can commit a write the test expects to fail.
  void Pause(int member) const;
  void Resume(int member) const;  // SIGCONT
  std::string Log(int member) const;

 private:
  struct Member {
    pid_t pid = -1;
    int client_port = 0;
    int peer_port = 0;
    std::string dir;
  };
  void StartMember(size_t index, const std::string& initial_cluster, const std::string& token);
  bool ServesReads(const std::string& endpoint) const;

  std::vector<Member> members_;
  std::string root_;
  std::string error_;
};

}  // namespace dpl::rendezvous::testing
