// What every store behind the StoreClient interface must do alike, run against each: the built-in
// store (a server in this process) and an etcd store (a one-member etcd cluster the suite starts;
// skipped with a message when etcd is not installed). Set, get, wait, add, delete, their timeouts
// and their messages, the plugins' C view, and the join and barrier on top of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <thread>

#include "etcd_cluster.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::EtcdCluster;

enum class StoreKind { kBuiltin, kEtcd };

std::string NameOf(const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param == StoreKind::kBuiltin ? "Builtin" : "Etcd";
}

class StoreConformanceTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    if (GetParam() == StoreKind::kEtcd) {
      if (!EtcdCluster::Installed()) GTEST_SKIP() << testing::kNoEtcd;
      if (!cluster_) cluster_ = std::make_unique<EtcdCluster>(1);
      ASSERT_TRUE(cluster_->started()) << cluster_->error();
      return;
    }
    StoreServerOptions options;
    options.bind_addr = "127.0.0.1";
    options.job_token = Token();
    auto server = StoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }

  // Each test its own job, so the tests share the etcd cluster without sharing keys.
  static std::string Token() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  StoreClientOptions Options() const {
    StoreClientOptions options;
    options.job_token = Token();
    options.connect_timeout = 5s;
    options.call_timeout = 5s;
    if (server_) {
      options.host = "127.0.0.1";
      options.port = server_->port();
    } else {
      options.etcd_endpoints = cluster_->Endpoints();
    }
    return options;
  }

  std::unique_ptr<StoreClient> Connect() const {
    auto client = StoreClient::Connect(Options());
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<StoreServer> server_;
  static std::unique_ptr<EtcdCluster> cluster_;
};

std::unique_ptr<EtcdCluster> StoreConformanceTest::cluster_;

INSTANTIATE_TEST_SUITE_P(Stores, StoreConformanceTest,
                         ::testing::Values(StoreKind::kBuiltin, StoreKind::kEtcd), NameOf);

TEST_P(StoreConformanceTest, SetThenGetReturnsTheLastValueIncludingEmptyAndBinaryOnes) {
  auto client = Connect();
  ASSERT_TRUE(client);
  std::vector<uint8_t> binary(512 * 1024 + 3);
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<uint8_t>(i * 31);
  ASSERT_TRUE(client->Set("empty", {}).ok());
  ASSERT_TRUE(client->Set("binary", binary).ok());
  ASSERT_TRUE(client->Set("k", ToBytes("first")).ok());
  ASSERT_TRUE(client->Set("k", ToBytes("second")).ok());
  EXPECT_EQ(*client->Get("empty", 0ms), std::vector<uint8_t>());
  EXPECT_EQ(*client->Get("binary", 0ms), binary);
  EXPECT_EQ(FromBytes(*client->Get("k", 0ms)), "second");
  auto other = Connect();
  ASSERT_TRUE(other);
  EXPECT_EQ(FromBytes(*other->Get("k", 0ms)), "second");
}

TEST_P(StoreConformanceTest, GetOfAMissingKeyTimesOutAfterItsTimeoutNamingTheKey) {
  auto client = Connect();
  ASSERT_TRUE(client);
  const auto start = Clock::now();
  auto value = client->Get("missing", 300ms);
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(value.ok());
  EXPECT_TRUE(value.status().IsTimeout());
  EXPECT_EQ(value.status().message(), "timed out after 0.3 s waiting for store key(s) 'missing'");
  EXPECT_GE(elapsed, 290ms);
  EXPECT_LT(elapsed, 2s);
  // The client stays usable after a key's timeout.
  ASSERT_TRUE(client->Set("missing", ToBytes("now")).ok());
  EXPECT_EQ(FromBytes(*client->Get("missing", 0ms)), "now");
}

TEST_P(StoreConformanceTest, GetAndWaitReturnAsSoonAsAnotherClientSetsTheKeys) {
  auto waiter = Connect();
  auto setter = Connect();
  ASSERT_TRUE(waiter && setter);
  std::thread set_later([&] {
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(setter->Set("a", ToBytes("1")).ok());
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(setter->Set("b", ToBytes("2")).ok());
  });
  const auto start = Clock::now();
  auto a = waiter->Get("a", 10s);
  const auto got_a = Clock::now() - start;
  Status both = waiter->Wait({"a", "b"}, 10s);
  const auto got_both = Clock::now() - start;
  set_later.join();
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(FromBytes(*a), "1");
  EXPECT_TRUE(both.ok()) << both.message();
  EXPECT_GE(got_a, 190ms);
  EXPECT_LT(got_a, 1500ms);
  EXPECT_GE(got_both, 390ms);
  EXPECT_LT(got_both, 1700ms);
}

TEST_P(StoreConformanceTest, WaitTimesOutNamingOnlyTheMissingKeysAndWaitsForNoKeyAtOnce) {
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Set("a", ToBytes("x")).ok());
  Status status = client->Wait({"a", "b", "c"}, 100ms);
  EXPECT_TRUE(status.IsTimeout());
  EXPECT_EQ(status.message(), "timed out after 0.1 s waiting for store key(s) 'b', 'c'");
  EXPECT_TRUE(client->Wait({"a"}, 0ms).ok());
  EXPECT_TRUE(client->Wait({}, 0ms).ok());
}

TEST_P(StoreConformanceTest, ConcurrentAddsFromManyClientsAreAtomic) {
  constexpr int kClients = 4;
  constexpr int kAddsEach = 25;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Connect());
  std::vector<std::vector<int64_t>> seen(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kAddsEach; ++n) {
        auto sum = clients[i]->Add("counter", 1);
        ASSERT_TRUE(sum.ok()) << sum.status().message();
        seen[i].push_back(*sum);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<int64_t> sums;
  for (const auto& each : seen) sums.insert(each.begin(), each.end());
  EXPECT_EQ(sums.size(), size_t{kClients * kAddsEach}) << "two Adds saw the same sum";
  EXPECT_EQ(*sums.begin(), 1);
  EXPECT_EQ(*sums.rbegin(), kClients * kAddsEach);
  EXPECT_EQ(FromBytes(*clients[0]->Get("counter", 0ms)), std::to_string(kClients * kAddsEach));
}

TEST_P(StoreConformanceTest, AddCreatesAMissingCounterAndRefusesAValueThatIsNoCounter) {
  auto client = Connect();
  ASSERT_TRUE(client);
  EXPECT_EQ(*client->Add("n", 0), 0);
  EXPECT_EQ(FromBytes(*client->Get("n", 0ms)), "0");
  EXPECT_EQ(*client->Add("n", 5), 5);
  EXPECT_EQ(*client->Add("n", -7), -2);
  EXPECT_EQ(*client->Add("n", 0), -2);
  ASSERT_TRUE(client->Set("text", ToBytes("abc")).ok());
  auto refused = client->Add("text", 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("key 'text' holds a value that is not a counter"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(FromBytes(*client->Get("text", 0ms)), "abc");
  EXPECT_EQ(*client->Add("n", 1), -1) << "the client is usable after a refusal";
}

TEST_P(StoreConformanceTest, DeleteRemovesTheKeyAndAMissingOneIsNoError) {
  auto client = Connect();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Set("k", ToBytes("v")).ok());
  ASSERT_TRUE(client->Delete("k").ok());
  EXPECT_TRUE(client->Get("k", 0ms).status().IsTimeout());
  EXPECT_TRUE(client->Delete("never-set").ok());
  EXPECT_EQ(*client->Add("k", 2), 2) << "a deleted counter starts again at 0";
}

TEST_P(StoreConformanceTest, ThePluginsViewPrefixesKeysAndMapsErrorsToStatusCodes) {
  auto client = Connect();
  ASSERT_TRUE(client);
  PluginStoreView view(*client, "backend/gloo/");
  const dpl_store_v1* store = view.view();
  ASSERT_EQ(store->set(store->context, "addr", "abcdef", 6), DPL_OK);
  EXPECT_EQ(FromBytes(*client->Get("backend/gloo/addr", 0ms)), "abcdef");
  char buffer[16] = {};
  uint64_t size = 0;
  ASSERT_EQ(store->get(store->context, "addr", buffer, sizeof buffer, &size, 0), DPL_OK);
  EXPECT_EQ(std::string(buffer, size), "abcdef");
  EXPECT_EQ(store->get(store->context, "nope", buffer, sizeof buffer, &size, 10), DPL_ERR_TIMEOUT);
  EXPECT_STREQ(store->last_error(store->context),
               "timed out after 0.01 s waiting for store key(s) 'backend/gloo/nope'");
  int64_t result = 0;
  ASSERT_EQ(store->add(store->context, "n", 5, &result), DPL_OK);
  EXPECT_EQ(result, 5);
}

TEST_P(StoreConformanceTest, TwoLaunchersJoinAndABarrierReleasesEveryRank) {
  LauncherJoin join;
  join.num_machines = 2;
  join.settings = {{"--num-machines", "2"}, {"--lr", "0.5"}};
  auto machine0 = Connect();
  auto machine1 = Connect();
  ASSERT_TRUE(machine0 && machine1);
  join.machine_id = 0;
  join.machine_name = "machine-a";
  EXPECT_EQ(*JoinAsLauncher(*machine0, join, 2s), 0);
  join.machine_id.reset();
  join.machine_name = "machine-b";
  EXPECT_EQ(*JoinAsLauncher(*machine1, join, 2s), 1);
  EXPECT_EQ(MachineName(*machine0, 1), "machine-b");

  constexpr int kRanks = 3;
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&] {
      auto client = Connect();
      ASSERT_TRUE(client);
      Status passed = Barrier(*client, AttemptPrefix(0), "b", kRanks, 10s);
      EXPECT_TRUE(passed.ok()) << passed.message();
    });
  }
  for (auto& rank : ranks) rank.join();
  EXPECT_EQ(Barrier(*machine0, AttemptPrefix(1), "b", 2, 20ms).message(),
            "barrier 'b': 1 of 2 ranks arrived: timed out after 0.02 s waiting for store key(s) "
            "'attempt/1/barrier/b/done'");
}

}  // namespace
}  // namespace dpl::rendezvous
