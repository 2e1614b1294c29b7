// Real training jobs through the launcher binary and each store: two machines on loopback that
// keep their keys in a real etcd cluster (--store etcd://..., skipped with a message without
// etcd), --store values a launcher refuses, and the built-in store of machine 0 under a slowloris
// flood of a thousand connections while the second machine joins.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/descriptor_limit.hpp"
#include "rendezvous/etcd_cluster.hpp"
#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using rendezvous::testing::EtcdCluster;

// Connections to 127.0.0.1:port that send their first bytes, if any, and then nothing; closed
// when destroyed.
class Flood {
 public:
  ~Flood() {
    for (int fd : sockets_) close(fd);
  }
  bool Open(int port, const std::vector<uint8_t>& first_bytes) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    sockets_.push_back(fd);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) return false;
    return first_bytes.empty() || send(fd, first_bytes.data(), first_bytes.size(), MSG_NOSIGNAL) ==
                                      static_cast<ssize_t>(first_bytes.size());
  }

 private:
  std::vector<int> sockets_;
};

// The seconds (--log-time elapsed) on the first line of `output` that contains `text`, or -1.
double ElapsedAt(const std::string& output, const std::string& text) {
  const std::regex line("^ *([0-9.]+)s .*" + std::regex_replace(text, std::regex("[.()]"), "\\$&"));
  std::smatch match;
  std::istringstream lines(output);
  for (std::string each; std::getline(lines, each);) {
    if (std::regex_search(each, match, line)) return std::stod(match[1]);
  }
  return -1;
}

class StoreJobsTest : public TrainingJobTest {
 protected:
  // Two machines x one process of the mlp through the tcp backend, a few steps.
  Args Machine(int id, const Args& extra) const {
    Args args = Job("tcp", "mlp", 1, {"--num-machines", "2", "--max-steps", "5"});
    if (id >= 0) args.insert(args.end(), {"--machine-id", std::to_string(id)});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Machine `id` of an elastic job of 2 to 3 machines of the test model in `cluster`, checkpoints
  // in `checkpoints`.
  Args ElasticEtcdMachine(int id, const EtcdCluster& cluster,
                          const std::string& checkpoints) const {
    return WithValue(Job("tcp", "faulty", 1,
                         {"--num-machines",
                          "2:3",
                          "--machine-id",
                          std::to_string(id),
                          "--store",
                          cluster.Url(),
                          "--job-token",
                          "etcd-loses-machine-0",
                          "--max-steps",
                          "400",
                          "--checkpoint-dir",
                          checkpoints,
                          "--checkpoint-every",
                          "10",
                          "--max-restarts",
                          "2",
                          "--join-grace",
                          "1",
                          "--rendezvous-timeout",
                          "60",
                          "--log-interval",
                          "10",
                          "--model-options",
                          "step_ms=20"}),
                     "--batch-size", "12");
  }
};

TEST_F(StoreJobsTest, TwoMachinesTrainWithTheirKeysInEtcd) {
  if (!EtcdCluster::Installed()) GTEST_SKIP() << rendezvous::testing::kNoEtcd;
  EtcdCluster cluster(3);
  ASSERT_TRUE(cluster.started()) << cluster.error();
  const Args store = {"--store", cluster.Url(), "--job-token", "store-jobs-etcd"};
  LauncherProcess machine0(Machine(0, store), OutputPath("m0"));
  LauncherProcess machine1(Machine(1, store), OutputPath("m1"));
  const auto status0 = machine0.Wait(90s);
  const auto status1 = machine1.Wait(30s);
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "[launcher 0] the job's store is the etcd cluster " +
                                              cluster.Url() + ", for 2 machines x 1 processes"))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] training done: 5 steps")) << machine0.Output();
  EXPECT_FALSE(Contains(machine0.Output(), "listening on port")) << "machine 0 served a store";
}

// Note [Attempt coordinator] in launcher/rendezvous/liveness.cpp: an elastic job of three machines
// on a three-member etcd cluster, one member per machine; machine 0 (its launcher, loader and
// worker, one process group) and its etcd member are killed mid-run. Machines 1 and 2 go on on
// their own, in place, machine 1 coordinating and its worker now rank 0; a replacement started
// as machine 0 joins the running job as a new machine, and the run finishes on three.
TEST_F(StoreJobsTest, AnElasticJobInEtcdFinishesOnMachinesOneAndTwoWhenMachineZeroDies) {
  if (!EtcdCluster::Installed()) GTEST_SKIP() << rendezvous::testing::kNoEtcd;
  EtcdCluster cluster(3);
  ASSERT_TRUE(cluster.started()) << cluster.error();
  const std::string checkpoints = dir_ + "/checkpoints";
  auto machine = [&](int id) { return ElasticEtcdMachine(id, cluster, checkpoints); };
  LauncherProcess machine0(machine(0), OutputPath("m0"), {}, ProcessGroup::kOwn);
  LauncherProcess machine1(machine(1), OutputPath("m1"), {}, ProcessGroup::kOwn);
  LauncherProcess machine2(machine(2), OutputPath("m2"), {}, ProcessGroup::kOwn);
  const std::string first = checkpoints + "/checkpoint-0000000010.pt";
  for (int i = 0; i < 6000 && !std::filesystem::exists(first); ++i) usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(first)) << machine0.Output() << machine1.Output();
  ASSERT_EQ(kill(-machine0.pid(), SIGKILL), 0);
  cluster.Kill(0);
  machine0.Wait(5s);
  LauncherProcess replacement(machine(0), OutputPath("m0-again"), {}, ProcessGroup::kOwn);
  const auto status1 = machine1.Wait(120s);
  const auto status2 = machine2.Wait(30s);
  const auto replaced = replacement.Wait(30s);
  EXPECT_TRUE(ExitedWith(replaced, 0)) << Describe(replaced) << replacement.Output();
  EXPECT_TRUE(Contains(replacement.Output(),
                       "runs on without its machine 0: this launcher joins "
                       "it as a new machine"))
      << replacement.Output();
  const std::string output1 = machine1.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << output1;
  EXPECT_TRUE(ExitedWith(status2, 0)) << Describe(status2) << machine2.Output();
  // Machine 1's worker goes on in place as rank 0 (Note [Shrink in place]).
  EXPECT_TRUE(Contains(output1,
                       "[launcher 1] the job continues on 2 machines (was 3) in place, from the "
                       "newest step a worker holds: machine 0 ("))
      << output1;
  EXPECT_TRUE(Contains(output1, "[rank 0] continuing from step ")) << output1;
  EXPECT_TRUE(Contains(output1, "the job continues on 3 machines (was 2) in place")) << output1;
  EXPECT_TRUE(Contains(output1, "[rank 0] training done: 400 steps")) << output1;
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/checkpoint-0000000400.pt")) << output1;
}

// Note [A token used again] in launcher/rendezvous/etcd_store.cpp: the same elastic job started
// again at once, under its token, while the keys of the one that finished still live in etcd,
// trains as a new job (it joined the ended one and exited 0 having trained nothing).
TEST_F(StoreJobsTest, AJobStartedAgainAtOnceUnderItsTokenTrainsAnew) {
  if (!EtcdCluster::Installed()) GTEST_SKIP() << rendezvous::testing::kNoEtcd;
  EtcdCluster cluster(1);
  ASSERT_TRUE(cluster.started()) << cluster.error();
  const Args store = {"--store",    cluster.Url(),          "--job-token",
                      "used-twice", "--rendezvous-timeout", "30"};
  for (const char* run : {"first", "again"}) {
    SCOPED_TRACE(run);
    Args job = store;
    job.insert(job.end(), {"--checkpoint-dir", dir_ + "/checkpoints-" + run});
    const auto machine = [&](int id) {
      return WithValue(WithValue(Machine(id, job), "--num-machines", "2:3"), "--batch-size", "12");
    };
    LauncherProcess machine0(machine(0), OutputPath(std::string(run) + "-m0"));
    LauncherProcess machine1(machine(1), OutputPath(std::string(run) + "-m1"));
    const auto status0 = machine0.Wait(90s);
    const auto status1 = machine1.Wait(30s);
    EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
    EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
    EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] training done: 5 steps"))
        << machine0.Output() << machine1.Output();
    EXPECT_FALSE(Contains(machine1.Output(), "finished without this machine")) << machine1.Output();
  }
}

TEST_F(StoreJobsTest, ALauncherRefusesAStoreItCannotUseNamingIt) {
  LauncherProcess unknown(Machine(0, {"--store", "consul://127.0.0.1:8500"}), OutputPath("kind"));
  EXPECT_TRUE(ExitedWith(unknown.Wait(30s), 1)) << unknown.Output();
  EXPECT_TRUE(Contains(unknown.Output(),
                       "[launcher 0] error: --store 'consul://127.0.0.1:8500' is not a store: give "
                       "etcd://HOST:PORT[,HOST:PORT...] (the client URLs of an etcd cluster's "
                       "members), or leave --store out for the built-in store of machine 0"))
      << unknown.Output();
  LauncherProcess unreachable(
      Machine(0, {"--store", "etcd://127.0.0.1:1", "--rendezvous-timeout", "1"}),
      OutputPath("unreachable"));
  EXPECT_TRUE(ExitedWith(unreachable.Wait(30s), 1)) << unreachable.Output();
  EXPECT_TRUE(Contains(unreachable.Output(),
                       "[launcher 0] error: joining the job's store in etcd://127.0.0.1:1 "
                       "(--store): no member of the etcd cluster etcd://127.0.0.1:1 could serve "
                       "the request (etcd member 127.0.0.1:1: Connection refused)"))
      << unreachable.Output();
  EXPECT_FALSE(Contains(unreachable.Output(), "[rank ")) << "a worker started";
}

// Slowloris against machine 0's built-in store: 1,000 connections held open (60% idle, 20% with
// 3 bytes of a frame header, 20% with most of a hello) while the second machine joins it.
TEST_F(StoreJobsTest, AMachineJoinsWithin2sThroughASlowlorisFloodAndTheJobTrains) {
  constexpr int kFlood = 1000;
  const std::string too_few = rendezvous::testing::AllowDescriptors(kFlood + 200);
  if (!too_few.empty()) GTEST_SKIP() << too_few;
  LauncherProcess machine0(Machine(0, {"--master-port", "0"}), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  // A hello (op 0x01) announcing 16 bytes that never all come, and a header cut after 3 bytes.
  const std::vector<uint8_t> partial_hello = {0x01, 0x10, 0, 0, 0, 0x4C, 0x50, 0x44, 0x53};
  const std::vector<uint8_t> header_start = {0x01, 0x10, 0x00};
  Flood flood;
  for (int i = 0; i < kFlood; ++i) {
    const std::vector<uint8_t> none;
    ASSERT_TRUE(flood.Open(port, i % 10 < 6   ? none
                                 : i % 10 < 8 ? header_start
                                              : partial_hello))
        << "connection " << i;
  }
  // Without --machine-id: it finds machine 0's store through the flood and says when it joined.
  LauncherProcess machine1(
      Machine(-1, {"--master-port", std::to_string(port), "--log-time", "elapsed"}),
      OutputPath("m1"));
  const auto status1 = machine1.Wait(60s);
  const auto status0 = machine0.Wait(30s);
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  const double joined = ElapsedAt(machine1.Output(), "this is machine 1");
  EXPECT_GE(joined, 0.0) << machine1.Output();
  EXPECT_LT(joined, 2.0) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] training done: 5 steps")) << machine0.Output();
}

}  // namespace
}  // namespace dpl::test
