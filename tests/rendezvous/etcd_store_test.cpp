// What only the etcd store does, on real etcd clusters the tests start on loopback: a member that
// dies while the others keep serving, leases that lapse with their process, jobs kept apart by
// their token, endpoints that are wrong or not etcd. Skipped with a message without etcd.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <future>
#include <thread>

#include "etcd_cluster.hpp"
#include "rendezvous/etcd_http.hpp"
#include "rendezvous/etcd_json.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_location.hpp"
#include "store_test_support.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::EtcdCluster;

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdCluster::Installed()) GTEST_SKIP() << testing::kNoEtcd;
  }

  void StartCluster(int members) {
    cluster_ = std::make_unique<EtcdCluster>(members);
    ASSERT_TRUE(cluster_->started()) << cluster_->error();
  }

  StoreClientOptions Options(const std::string& token = "etcd-test") const {
    StoreClientOptions options;
    options.etcd_endpoints = cluster_->Endpoints();
    options.job_token = token;
    options.connect_timeout = 5s;
    options.call_timeout = 5s;
    options.etcd_lease_ttl = 2s;
    return options;
  }

  std::unique_ptr<StoreClient> Connect(const StoreClientOptions& options) const {
    auto client = StoreClient::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(*client) : nullptr;
  }

  // A child process that connects with `options`, sets `key`, says so, and waits to be killed.
  pid_t ChildThatSets(const StoreClientOptions& options, const std::string& key) const {
    int ready[2];
    EXPECT_EQ(pipe(ready), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      auto client = StoreClient::Connect(options);
      if (!client.ok() || !(*client)->Set(key, ToBytes("set by the child")).ok()) _exit(1);
      if (write(ready[1], "r", 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(ready[1]);
    pollfd entry{ready[0], POLLIN, 0};
    char byte = 0;
    EXPECT_TRUE(poll(&entry, 1, 10000) == 1 && read(ready[0], &byte, 1) == 1)
        << "the child did not set its key";
    close(ready[0]);
    return pid;
  }

  std::unique_ptr<EtcdCluster> cluster_;
};

// How long `client` sees `key` before it vanishes, polling; nullopt if it stays for `timeout`.
std::optional<std::chrono::milliseconds> TimeUntilGone(StoreClient& client, const std::string& key,
                                                       std::chrono::milliseconds timeout) {
  const auto start = Clock::now();
  while (Clock::now() - start < timeout) {
    if (client.Get(key, 0ms).status().IsTimeout()) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    }
    std::this_thread::sleep_for(50ms);
  }
  return std::nullopt;
}

TEST_F(EtcdStoreTest, AClusterWithAMemberKilledKeepsServingThroughTheOthers) {
  StartCluster(3);
  auto writer = Connect(Options());
  auto waiter = Connect(Options());
  ASSERT_TRUE(writer && waiter);
  ASSERT_TRUE(writer->Set("before", ToBytes("1")).ok());
  ASSERT_EQ(*writer->Add("count", 1), 1);
  // The waiter watches through the first member, the one about to die.
  auto waited = std::async(std::launch::async, [&] { return waiter->Wait({"after"}, 20s); });
  std::this_thread::sleep_for(300ms);
  cluster_->Kill(0);
  const auto start = Clock::now();
  EXPECT_EQ(FromBytes(*writer->Get("before", 0ms)), "1");
  EXPECT_EQ(*writer->Add("count", 1), 2);
  ASSERT_TRUE(writer->Set("after", ToBytes("2")).ok());
  ASSERT_EQ(waited.wait_for(10s), std::future_status::ready) << "the waiter hangs";
  Status status = waited.get();
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_LT(Clock::now() - start, 8s);
  auto late = Connect(Options());  // a client that comes after the member died
  ASSERT_TRUE(late);
  EXPECT_EQ(*late->Add("count", 1), 3);
}

// A partition, as its minority side sees it: the member it reaches cannot reach the others, so
// it can commit nothing and serves no linearizable read; every call fails at its deadline,
// naming the member and why, and nothing hangs.
TEST_F(EtcdStoreTest, ASideWithoutTheQuorumFailsEveryCallAtItsDeadline) {
  StartCluster(3);
  StoreClientOptions minority = Options();
  minority.etcd_endpoints = {cluster_->Endpoints()[0]};
  minority.call_timeout = 1500ms;
  // Longer than the partition: the stopped members' clocks run on, and with nobody to renew it
  // the job's lease would expire the moment they wake.
  minority.etcd_lease_ttl = 60s;
  auto client = Connect(minority);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Set("k", ToBytes("v")).ok());
  cluster_->Pause(1);  // the other two members stop answering: a partition
  cluster_->Pause(2);
  for (const auto& call :
       std::vector<std::function<Status()>>{[&] { return client->Set("k", ToBytes("w")); },
                                            [&] { return client->Get("k", 0ms).status(); },
                                            [&] { return client->Add("n", 1).status(); },
                                            [&] { return client->Wait({"k"}, 0ms); }}) {
    const auto start = Clock::now();
    Status status = call();
    const auto took = Clock::now() - start;
    EXPECT_TRUE(status.IsTimeout()) << status.message();
    EXPECT_NE(status.message().find("etcd member " + cluster_->Endpoints()[0] +
                                    " did not answer in time"),
              std::string::npos)
        << status.message();
    EXPECT_GE(took, 1400ms);
    EXPECT_LT(took, 4s);
  }
  cluster_->Resume(1);
  cluster_->Resume(2);
  // Healed: the same client goes on.
  const auto start = Clock::now();
  Status healed = client->Set("k", ToBytes("x"));
  while (!healed.ok() && Clock::now() - start < 10s) healed = client->Set("k", ToBytes("x"));
  EXPECT_TRUE(healed.ok()) << healed.message();
}

TEST_F(EtcdStoreTest, ALeaseThatIsNotRenewedMakesItsKeysVanish) {
  StartCluster(1);
  StoreClientOptions own = Options();
  own.key_lifetime = KeyLifetime::kClient;
  // A renewal every 1.3 s leaves at least 2.6 s of the lease at the kill, so the lower bound below
  // holds even when a loaded machine delays a renewal by 2 s (2 s leases failed it once in a
  // full parallel test run).
  own.etcd_lease_ttl = 4s;
  const pid_t child = ChildThatSets(own, "job/alive/7");
  auto observer = Connect(Options());
  ASSERT_TRUE(observer);
  ASSERT_TRUE(observer->Set("job/stays", ToBytes("x")).ok());
  EXPECT_EQ(FromBytes(*observer->Get("job/alive/7", 0ms)), "set by the child");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  const auto gone = TimeUntilGone(*observer, "job/alive/7", 8s);
  ASSERT_TRUE(gone) << "the key outlived its lease";
  EXPECT_GE(*gone, 500ms) << "the key vanished before its lease could expire";
  EXPECT_TRUE(observer->Get("job/stays", 0ms).ok()) << "a key of the job's lease vanished";

  // A client destroyed in good order revokes its lease: its keys vanish at once.
  auto beat = Connect(own);
  ASSERT_TRUE(beat);
  ASSERT_TRUE(beat->Set("job/alive/8", ToBytes("x")).ok());
  beat.reset();
  EXPECT_TRUE(observer->Get("job/alive/8", 0ms).status().IsTimeout());
}

TEST_F(EtcdStoreTest, TheJobsKeysVanishATtlAfterItsLastProcessDied) {
  StartCluster(1);
  const pid_t child = ChildThatSets(Options("ended-job"), "job/settings");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Looked at without a client of the job, which would renew the job's lease.
  auto count_keys = [&] {
    const auto deadline = Clock::now() + 2s;
    auto connection = etcd::HttpConnection::Open(cluster_->Endpoints()[0], deadline);
    if (!connection.ok()) return int64_t{-1};
    etcd::Sent sent;
    // Every key from "/" on: {"key": "/", "range_end": "\0"}.
    auto reply =
        (*connection)
            ->Post("/v3/kv/range", "{\"key\":\"Lw==\",\"range_end\":\"AA==\",\"count_only\":true}",
                   deadline, &sent);
    if (!reply.ok()) return int64_t{-1};
    auto json = etcd::Json::Parse(reply->body);
    return json ? json->Integer("count") : int64_t{-1};
  };
  EXPECT_GE(count_keys(), 2) << "the job's lease and its key";
  const auto start = Clock::now();
  while (count_keys() != 0 && Clock::now() - start < 8s) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(count_keys(), 0) << "the job's keys outlived every process of the job";
}

TEST_F(EtcdStoreTest, JobsWithAnotherTokenDoNotSeeEachOthersKeys) {
  StartCluster(1);
  auto mine = Connect(Options("job-a"));
  auto theirs = Connect(Options("job-b"));
  ASSERT_TRUE(mine && theirs);
  ASSERT_TRUE(mine->Set("k", ToBytes("a")).ok());
  EXPECT_TRUE(theirs->Get("k", 0ms).status().IsTimeout());
  EXPECT_EQ(*theirs->Add("k", 1), 1);
  EXPECT_EQ(FromBytes(*mine->Get("k", 0ms)), "a");
}

TEST_F(EtcdStoreTest, MachineZeroRefusesTheKeysOfAnEarlierJobWithTheSameToken) {
  StartCluster(1);
  auto location = ParseStoreLocation(cluster_->Url());
  ASSERT_TRUE(location.ok()) << location.status().message();
  auto fresh = Connect(Options("fresh"));
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(RefuseEarlierJob(*fresh, *location).ok());
  LauncherJoin join;
  join.machine_id = 0;
  join.machine_name = "machine-a";
  ASSERT_TRUE(JoinAsLauncher(*fresh, join, 1s).ok());
  auto again = Connect(Options("fresh"));
  ASSERT_TRUE(again);
  EXPECT_EQ(RefuseEarlierJob(*again, *location).message(),
            "the etcd cluster " + cluster_->Url() +
                " holds the keys of another job with this --job-token (one that still runs, or "
                "ended less than 10 s ago): give this job a --job-token of its own, or wait that "
                "long");
}

// Why a client of the etcd store at `endpoint` alone, with a connect timeout of 500 ms, could not
// connect; checks that it failed as a timeout, within 2 s.
Status TimedOutConnecting(const std::string& endpoint) {
  StoreClientOptions options;
  options.etcd_endpoints = {endpoint};
  options.connect_timeout = 500ms;
  const auto start = Clock::now();
  auto client = StoreClient::Connect(options);
  EXPECT_FALSE(client.ok());
  EXPECT_TRUE(client.status().IsTimeout());
  EXPECT_LT(Clock::now() - start, 2s);
  return client.ok() ? Status::Ok() : client.status();
}

TEST_F(EtcdStoreTest, AnEndpointWhereNothingListensFailsAtTheConnectTimeoutNamingIt) {
  EXPECT_EQ(TimedOutConnecting("127.0.0.1:1").message(),
            "joining the job's store in etcd://127.0.0.1:1 (--store): no member of the etcd "
            "cluster etcd://127.0.0.1:1 could serve the request (etcd member 127.0.0.1:1: "
            "Connection refused); check that its members run, that a majority of them can reach "
            "each other, and that --store lists their client URLs");
}

TEST_F(EtcdStoreTest, AnEndpointThatIsNotEtcdIsRefusedAtOnceNamingIt) {
  StoreServerOptions server_options;
  server_options.bind_addr = "127.0.0.1";
  auto builtin = StoreServer::Start(server_options);
  ASSERT_TRUE(builtin.ok()) << builtin.status().message();
  const std::string endpoint = "127.0.0.1:" + std::to_string((*builtin)->port());
  StoreClientOptions options;
  options.etcd_endpoints = {endpoint};
  options.connect_timeout = 5s;
  const auto start = Clock::now();
  auto client = StoreClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_FALSE(client.status().IsTimeout());
  EXPECT_LT(Clock::now() - start, 2s) << "an endpoint that is not etcd waits for nothing";
  EXPECT_NE(client.status().message().find("etcd member " + endpoint), std::string::npos)
      << client.status().message();
  EXPECT_NE(client.status().message().find("is it the client URL of an etcd member"),
            std::string::npos)
      << client.status().message();
}

TEST_F(EtcdStoreTest, AMemberThatNeverAnswersFailsAtTheConnectTimeoutNamingIt) {
  testing::SilentListener silent(false);
  const std::string endpoint = "127.0.0.1:" + std::to_string(silent.port());
  const std::string message = TimedOutConnecting(endpoint).message();
  EXPECT_NE(message.find("etcd member " + endpoint + " did not answer in time"), std::string::npos)
      << message;
}

TEST_F(EtcdStoreTest, ADeadEndpointFirstInTheListIsPassedOver) {
  StartCluster(1);
  StoreClientOptions options = Options();
  options.etcd_endpoints.insert(options.etcd_endpoints.begin(), "127.0.0.1:1");
  auto client = Connect(options);
  ASSERT_TRUE(client);
  EXPECT_EQ(*client->Add("n", 4), 4);
}

TEST(StoreLocationTest, TheStoreFlagIsParsedOrRefusedNamingWhatIsWrong) {
  EXPECT_TRUE(ParseStoreLocation("")->builtin());
  auto three = ParseStoreLocation("etcd://10.0.0.1:2379,node2:2379,[::1]:2379");
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_EQ(three->etcd_endpoints,
            (std::vector<std::string>{"10.0.0.1:2379", "node2:2379", "[::1]:2379"}));
  EXPECT_EQ(three->Describe(), "the etcd cluster etcd://10.0.0.1:2379,node2:2379,[::1]:2379");
  const std::string form =
      "give etcd://HOST:PORT[,HOST:PORT...] (the client URLs of an etcd cluster's members), or "
      "leave --store out for the built-in store of machine 0";
  EXPECT_EQ(ParseStoreLocation("consul://a:1").status().message(),
            "--store 'consul://a:1' is not a store: " + form);
  EXPECT_EQ(ParseStoreLocation("etcd://").status().message(),
            "--store 'etcd://' names no etcd member: " + form);
  EXPECT_EQ(ParseStoreLocation("etcd://a:1,,b:2").status().message(),
            "--store 'etcd://a:1,,b:2': an empty member; " + form);
  EXPECT_EQ(ParseStoreLocation("etcd://node1").status().message(),
            "--store 'etcd://node1': member 'node1' is not HOST:PORT; " + form);
  EXPECT_EQ(ParseStoreLocation("etcd://node1:70000").status().message(),
            "--store 'etcd://node1:70000': member 'node1:70000' has no port in 1..65535; " + form);
  EXPECT_EQ(ParseStoreLocation("etcd://node1:x").status().message(),
            "--store 'etcd://node1:x': member 'node1:x' has no port in 1..65535; " + form);
}

}  // namespace
}  // namespace dpl::rendezvous
