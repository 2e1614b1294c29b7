#include "etcd_cluster.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "rendezvous/etcd_http.hpp"

namespace dpl::rendezvous::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kStartTimeout = 20s;

// Free loopback ports, all distinct: each is bound until all are chosen.
std::vector<int> FreePorts(size_t count) {
  std::vector<int> sockets, ports;
  for (size_t i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
    sockets.push_back(fd);
    ports.push_back(ntohs(address.sin_port));
  }
  for (int fd : sockets) close(fd);
  return ports;
}

std::string PeerUrl(int port) {
  return "http://127.0.0.1:" + std::to_string(port);
}

}  // namespace

bool EtcdCluster::Installed() {
  return std::system("command -v etcd > /dev/null 2>&1") == 0;
}

EtcdCluster::EtcdCluster(int members, const std::string& data_parent) {
  std::string pattern = data_parent + "/dpl-etcd-XXXXXX";
  char fallback[] = "/tmp/dpl-etcd-XXXXXX";
  const char* root = mkdtemp(pattern.data());
  if (root == nullptr) root = mkdtemp(fallback);
  root_ = root == nullptr ? "" : root;
  const std::vector<int> ports = FreePorts(static_cast<size_t>(members) * 2);
  std::string initial_cluster;
  members_.resize(static_cast<size_t>(members));
  for (size_t i = 0; i < members_.size(); ++i) {
    members_[i].client_port = ports[2 * i];
    members_[i].peer_port = ports[2 * i + 1];
    members_[i].dir = root_ + "/m" + std::to_string(i);
    initial_cluster += (i ? ",m" : "m") + std::to_string(i) + "=" + PeerUrl(members_[i].peer_port);
  }
  const std::string token = "dpl-test-" + std::to_string(getpid()) + "-" + std::to_string(ports[0]);
  for (size_t i = 0; i < members_.size(); ++i) StartMember(i, initial_cluster, token);
  const auto deadline = Clock::now() + kStartTimeout;
  for (size_t i = 0; i < members_.size(); ++i) {
    while (!ServesReads(Endpoints()[i])) {
      if (Clock::now() >= deadline) {
        error_ = "etcd member " + std::to_string(i) + " did not serve within 20 s; its log:\n" +
                 Log(static_cast<int>(i));
        return;
      }
      std::this_thread::sleep_for(50ms);
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (size_t i = 0; i < members_.size(); ++i) Kill(static_cast<int>(i));
  std::error_code ignored;
  if (!root_.empty()) std::filesystem::remove_all(root_, ignored);
}

void EtcdCluster::StartMember(size_t index, const std::string& initial_cluster,
                              const std::string& token) {
  Member& member = members_[index];
  mkdir(member.dir.c_str(), 0700);
  const std::string client = PeerUrl(member.client_port), peer = PeerUrl(member.peer_port);
  std::vector<std::string> arguments = {"etcd",
                                        "--name=m" + std::to_string(index),
                                        "--data-dir=" + member.dir + "/data",
                                        "--listen-client-urls=" + client,
                                        "--advertise-client-urls=" + client,
                                        "--listen-peer-urls=" + peer,
                                        "--initial-advertise-peer-urls=" + peer,
                                        "--initial-cluster=" + initial_cluster,
                                        "--initial-cluster-state=new",
                                        "--initial-cluster-token=" + token,
                                        "--heartbeat-interval=50",
                                        "--election-timeout=500"};
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  const std::string log = member.dir + "/log";
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  member.pid = fork();
  if (member.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // no member outlives a test that crashed
    dup2(fd, 1);
    dup2(fd, 2);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(fd);
}

bool EtcdCluster::ServesReads(const std::string& endpoint) const {
  const auto deadline = Clock::now() + 1s;
  auto connection = etcd::HttpConnection::Open(endpoint, deadline);
  if (!connection.ok()) return false;
  etcd::Sent sent;
  auto reply = (*connection)->Post("/v3/kv/range", "{\"key\":\"AA==\"}", deadline, &sent);
  return reply.ok() && reply->status == 200;
}

std::vector<std::string> EtcdCluster::Endpoints() const {
  std::vector<std::string> endpoints;
  for (const Member& member : members_) {
    endpoints.push_back("127.0.0.1:" + std::to_string(member.client_port));
  }
  return endpoints;
}

std::string EtcdCluster::Url() const {
  std::string url = "etcd://";
  for (const auto& endpoint : Endpoints()) url += (url.size() > 7 ? "," : "") + endpoint;
  return url;
}

void EtcdCluster::Kill(int member) {
  Member& killed = members_[static_cast<size_t>(member)];
  if (killed.pid <= 0) return;
  kill(killed.pid, SIGKILL);
  waitpid(killed.pid, nullptr, 0);
  killed.pid = -1;
}

void EtcdCluster::Pause(int member) const {
  const pid_t paused = pid(member);
  if (paused <= 0) return;
  kill(paused, SIGSTOP);
  int status = 0;
  while (waitpid(paused, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
}

void EtcdCluster::Resume(int member) const {
  if (pid(member) > 0) kill(pid(member), SIGCONT);
}

std::string EtcdCluster::Log(int member) const {
  std::ifstream file(members_[static_cast<size_t>(member)].dir + "/log");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace dpl::rendezvous::testing
