// Note [A private store] in launcher/supervision/launcher.cpp: a one-machine job's store answers
// on loopback only and no process but its launcher holds the listening socket; a launcher that
// serves a store to other machines without a job token says so in its first line.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

// 0 when a connection to address:port is accepted, else the errno of the refusal.
int ConnectError(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.c_str(), &target.sin_addr);
  const int result = connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof target);
  const int error = result == 0 ? 0 : errno;
  close(fd);
  return error;
}

// This machine's IPv4 addresses besides 127.0.0.1, and 127.0.0.2 (loopback, but not the address
// the store binds).
std::vector<std::string> OtherAddresses() {
  std::vector<std::string> addresses = {"127.0.0.2"};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return addresses;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr, text,
              sizeof text);
    if (std::string(text) != "127.0.0.1") addresses.push_back(text);
  }
  freeifaddrs(list);
  return addresses;
}

// The inode of the socket listening on TCP `port` (/proc/net/tcp, state 0A), or "".
std::string ListeningSocketInode(int port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  char wanted[8];
  std::snprintf(wanted, sizeof wanted, ":%04X", port);
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (state == "0A" && local.size() > 5 && local.substr(local.size() - 5) == wanted) {
      return inode;
    }
  }
  return "";
}

// The processes with a descriptor on socket `inode`.
std::set<pid_t> ProcessesHolding(const std::string& inode) {
  std::set<pid_t> holders;
  const std::string target = "socket:[" + inode + "]";
  std::error_code ignored;
  for (const auto& process : std::filesystem::directory_iterator("/proc", ignored)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(process.path().filename().c_str()));
    if (pid <= 0) continue;
    for (const auto& fd : std::filesystem::directory_iterator(process.path() / "fd", ignored)) {
      std::error_code unreadable;
      if (std::filesystem::read_symlink(fd.path(), unreadable).string() == target) {
        holders.insert(pid);
      }
    }
  }
  return holders;
}

Args Concat(Args head, const Args& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

using PrivateStoreTest = TrainingJobTest;

TEST_F(PrivateStoreTest, AOneMachineJobsStoreAnswersOnLoopbackOnlyAndOnlyItsLauncherListens) {
  LauncherProcess job(
      Job("tcp", "faulty", 2, {"--master-port", "0", "--model-options", "step_ms=20"}),
      OutputPath("job"));
  const int port = job.WaitForStorePort();
  ASSERT_GT(port, 0) << job.Output();
  ASSERT_TRUE(WaitForWorkers(job.pid(), 2, 30s)) << job.Output();
  EXPECT_TRUE(Contains(job.Output(), "rendezvous store listening on port " + std::to_string(port) +
                                         " for 1 machine x 2 processes (on 127.0.0.1 only: no "
                                         "other machine joins)"))
      << job.Output();
  EXPECT_EQ(ConnectError("127.0.0.1", port), 0);
  for (const std::string& address : OtherAddresses()) {
    EXPECT_EQ(ConnectError(address, port), ECONNREFUSED) << address << ":" << port;
  }
  const std::string inode = ListeningSocketInode(port);
  ASSERT_FALSE(inode.empty()) << "nothing listens on port " << port;
  EXPECT_EQ(ProcessesHolding(inode), std::set<pid_t>{job.pid()})
      << "workers: " << WorkersOf(job.pid()).size();
  kill(job.pid(), SIGINT);
  job.Wait(30s);
}

TEST_F(PrivateStoreTest, AStoreForOtherMachinesWithoutATokenSaysSoInItsFirstLine) {
  const Args machine0 = {"--selftest",
                         "--num-machines",
                         "2",
                         "--machine-id",
                         "0",
                         "--num-processes",
                         "1",
                         "--batch-size",
                         "2",
                         "--rendezvous-timeout",
                         "1",
                         "--log-time",
                         "none",
                         "--plugin-dir",
                         DPL_TEST_PLUGIN_DIR};
  LauncherProcess open(Concat(machine0, {"--master-port", "0"}), OutputPath("open"));
  ASSERT_GT(open.WaitForStorePort(), 0) << open.Output();
  kill(open.pid(), SIGINT);
  open.Wait(30s);
  const std::string output = open.Output();
  EXPECT_EQ(output.substr(0, output.find('\n')),
            "[launcher 0] warning: no --job-token: anyone who can reach the store's port can join "
            "this job or stop it; give every launcher the same secret with --job-token TOKEN or "
            "DPL_JOB_TOKEN=TOKEN")
      << output;
  LauncherProcess closed(Concat(machine0, {"--master-port", "0", "--job-token", "secret"}),
                         OutputPath("closed"));
  ASSERT_GT(closed.WaitForStorePort(), 0) << closed.Output();
  kill(closed.pid(), SIGINT);
  closed.Wait(30s);
  EXPECT_FALSE(Contains(closed.Output(), "no --job-token")) << closed.Output();
}

}  // namespace
}  // namespace dpl::test
