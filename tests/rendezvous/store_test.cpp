// The rendezvous store in one process: real server and clients over loopback TCP.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <random>
#include <thread>

#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/wire_protocol.hpp"
#include "store_test_support.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<StoreServer> StartServer(const std::string& token = "") {
  StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.job_token = token;
  auto server = StoreServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status().message();
  return std::move(*server);
}

Result<std::unique_ptr<StoreClient>> ConnectTo(int port, const std::string& token = "",
                                               std::chrono::milliseconds timeout = 2s) {
  StoreClientOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.job_token = token;
  options.connect_timeout = timeout;
  return StoreClient::Connect(options);
}

std::unique_ptr<StoreClient> MustConnect(int port, const std::string& token = "") {
  auto client = ConnectTo(port, token);
  EXPECT_TRUE(client.ok()) << client.status().message();
  return std::move(*client);
}

TEST(StoreTest, SetThenGetReturnsTheValueIncludingEmptyAndLargeValues) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  const std::vector<uint8_t> empty;
  std::vector<uint8_t> large(3 * 1024 * 1024 + 7);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint8_t>(i * 31);
  ASSERT_TRUE(client->Set("empty", empty).ok());
  ASSERT_TRUE(client->Set("large", large).ok());
  ASSERT_TRUE(client->Set("k", ToBytes("first")).ok());
  ASSERT_TRUE(client->Set("k", ToBytes("second")).ok());
  EXPECT_EQ(*client->Get("empty", 0ms), empty);
  EXPECT_EQ(*client->Get("large", 0ms), large);
  EXPECT_EQ(FromBytes(*client->Get("k", 0ms)), "second");
}

TEST(StoreTest, GetOfAMissingKeyTimesOutWithTheKeyInTheMessage) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  const auto start = std::chrono::steady_clock::now();
  auto value = client->Get("missing", 100ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().message(), "timed out after 0.1 s waiting for store key(s) 'missing'");
  EXPECT_GE(elapsed, 100ms);
  EXPECT_LT(elapsed, 2s);
}

TEST(StoreTest, GetAndWaitReturnOnceAnotherClientSetsTheKeys) {
  auto server = StartServer();
  auto waiter = MustConnect(server->port());
  auto setter = MustConnect(server->port());
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(setter->Set("a", ToBytes("1")).ok());
    EXPECT_TRUE(setter->Set("b", ToBytes("2")).ok());
  });
  EXPECT_TRUE(waiter->Wait({"a", "b"}, 5s).ok());
  EXPECT_EQ(FromBytes(*waiter->Get("b", 5s)), "2");
  later.join();
}

TEST(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  ASSERT_TRUE(client->Set("present", {}).ok());
  Status status = client->Wait({"present", "x", "y"}, 50ms);
  EXPECT_EQ(status.message(), "timed out after 0.05 s waiting for store key(s) 'x', 'y'");
}

TEST(StoreTest, ConcurrentAddsFromManyClientsAreAtomic) {
  auto server = StartServer();
  constexpr int kClients = 8, kAddsEach = 100;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      auto client = MustConnect(server->port());
      for (int i = 0; i < kAddsEach; ++i) ASSERT_TRUE(client->Add("counter", 1).ok());
    });
  }
  for (auto& thread : threads) thread.join();
  auto client = MustConnect(server->port());
  EXPECT_EQ(*client->Add("counter", 0), kClients * kAddsEach);
  EXPECT_EQ(*client->Add("counter", -5), kClients * kAddsEach - 5);
  EXPECT_EQ(FromBytes(*client->Get("counter", 0ms)), std::to_string(kClients * kAddsEach - 5));
  ASSERT_TRUE(client->Set("text", ToBytes("abc")).ok());
  auto bad = client->Add("text", 1);
  EXPECT_EQ(bad.status().message(), "add 'text' refused by the rendezvous store at 127.0.0.1:" +
                                        std::to_string(server->port()) +
                                        ": key 'text' holds a value that is not a counter");
}

TEST(StoreTest, DeleteRemovesTheKey) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  ASSERT_TRUE(client->Set("k", ToBytes("v")).ok());
  ASSERT_TRUE(client->Delete("k").ok());
  EXPECT_FALSE(client->Get("k", 0ms).ok());
  EXPECT_TRUE(client->Delete("never-set").ok());
}

TEST(StoreTest, WrongJobTokenIsRefusedAndTheRightOneWorks) {
  auto server = StartServer("secret");
  auto stray = ConnectTo(server->port(), "guess");
  ASSERT_FALSE(stray.ok());
  EXPECT_EQ(stray.status().code(), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(stray.status().message(),
            "joining the rendezvous store at 127.0.0.1:" + std::to_string(server->port()) +
                ": handshake refused by the rendezvous store at 127.0.0.1:" +
                std::to_string(server->port()) +
                ": job token does not match the job's; pass the same --job-token (or "
                "DPL_JOB_TOKEN) to every launcher of the job");
  auto client = MustConnect(server->port(), "secret");
  EXPECT_TRUE(client->Set("k", {}).ok());
}

TEST(StoreTest, UnreachableServerFailsAfterTheTimeoutNamingHostAndPort) {
  int port;
  {
    auto server = StartServer();
    port = server->port();
  }  // closed: nothing listens there now
  const auto start = std::chrono::steady_clock::now();
  auto client = ConnectTo(port, "", 300ms);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().message(),
            "could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port) +
                " within 0.3 s (last error: Connection refused); check --master-addr and "
                "--master-port and that the launcher of --machine-id 0 is running");
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 3s);
}

TEST(StoreTest, PortInUseIsAnErrorNamingAddrAndPort) {
  auto server = StartServer();
  StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.port = server->port();
  auto second = StoreServer::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            "cannot serve the rendezvous store on 127.0.0.1:" + std::to_string(server->port()) +
                ": Address already in use (another process uses this port; pick another "
                "--master-port or stop that process)");
}

// Sends raw bytes to the store, then reads until the server closes the connection.
void SendRaw(int port, const std::vector<uint8_t>& bytes) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  boost::system::error_code error;
  boost::asio::write(socket, boost::asio::buffer(bytes), error);
  socket.shutdown(boost::asio::ip::tcp::socket::shutdown_send, error);
  error = {};
  std::vector<uint8_t> sink(4096);
  while (!error) socket.read_some(boost::asio::buffer(sink), error);
  EXPECT_TRUE(error == boost::asio::error::eof || error == boost::asio::error::connection_reset)
      << error.message();
}

TEST(StoreTest, GarbageOversizedFramesAndUnknownOpsCloseOnlyThatConnection) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  ASSERT_TRUE(client->Set("before", ToBytes("1")).ok());

  std::vector<uint8_t> garbage(1024 * 1024);
  std::mt19937 random(7);
  for (auto& byte : garbage) byte = static_cast<uint8_t>(random());
  SendRaw(server->port(), garbage);

  // A handshake op whose body never comes: the server must not wait for the rest.
  const std::vector<uint8_t> truncated_hello = {0x01, 100, 0, 0, 0, 1, 2, 3};
  SendRaw(server->port(), truncated_hello);

  std::vector<uint8_t> oversized = testing::HelloFrame();
  const uint8_t too_long[] = {static_cast<uint8_t>(wire::Op::kSet), 0xff, 0xff, 0xff, 0xff};
  oversized.insert(oversized.end(), std::begin(too_long), std::end(too_long));
  SendRaw(server->port(), oversized);

  std::vector<uint8_t> unknown = testing::HelloFrame();
  const uint8_t unknown_op[] = {0x7e, 0, 0, 0, 0};
  unknown.insert(unknown.end(), std::begin(unknown_op), std::end(unknown_op));
  SendRaw(server->port(), unknown);

  std::vector<uint8_t> malformed = testing::HelloFrame();
  const uint8_t short_body[] = {static_cast<uint8_t>(wire::Op::kGet), 2, 0, 0, 0, 9, 9};
  malformed.insert(malformed.end(), std::begin(short_body), std::end(short_body));
  SendRaw(server->port(), malformed);

  // The old connection and a new one are both still served.
  EXPECT_EQ(FromBytes(*client->Get("before", 0ms)), "1");
  auto fresh = MustConnect(server->port());
  EXPECT_TRUE(fresh->Set("after", ToBytes("2")).ok());
  EXPECT_EQ(FromBytes(*client->Get("after", 1s)), "2");
}

TEST(StoreTest, ClientReportsALostServer) {
  auto server = StartServer();
  const int port = server->port();
  auto client = MustConnect(port);
  server.reset();
  Status status = client->Set("k", {});
  EXPECT_EQ(status.message().rfind("lost the connection to the rendezvous store at 127.0.0.1:" +
                                       std::to_string(port) + " during set 'k'",
                                   0),
            0u)
      << status.message();
}

TEST(PluginStoreViewTest, PrefixesKeysAndMapsErrorsToStatusCodes) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  PluginStoreView view(*client, "backend/gloo/");
  const dpl_store_v1* store = view.view();
  ASSERT_EQ(store->struct_size, sizeof(dpl_store_v1));
  ASSERT_EQ(store->version, DPL_STORE_VERSION);

  ASSERT_EQ(store->set(store->context, "addr", "abcdef", 6), DPL_OK);
  EXPECT_EQ(FromBytes(*client->Get("backend/gloo/addr", 0ms)), "abcdef");

  char small[3];
  uint64_t size = 0;
  EXPECT_EQ(store->get(store->context, "addr", small, sizeof small, &size, 0),
            DPL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(size, 6u);
  EXPECT_STREQ(store->last_error(store->context),
               "store get: value of key 'addr' has 6 bytes, the buffer 3");
  char buffer[16] = {};
  ASSERT_EQ(store->get(store->context, "addr", buffer, sizeof buffer, &size, 0), DPL_OK);
  EXPECT_EQ(std::string(buffer, size), "abcdef");

  EXPECT_EQ(store->get(store->context, "nope", buffer, sizeof buffer, &size, 10), DPL_ERR_TIMEOUT);
  EXPECT_STREQ(store->last_error(store->context),
               "timed out after 0.01 s waiting for store key(s) 'backend/gloo/nope'");
  const char* keys[] = {"addr", "other"};
  EXPECT_EQ(store->wait(store->context, keys, 2, 10), DPL_ERR_TIMEOUT);
  EXPECT_STREQ(store->last_error(store->context),
               "timed out after 0.01 s waiting for store key(s) 'backend/gloo/other'");
  EXPECT_EQ(store->wait(store->context, keys, 1, 10), DPL_OK);

  int64_t result = 0;
  ASSERT_EQ(store->add(store->context, "n", 5, &result), DPL_OK);
  ASSERT_EQ(store->add(store->context, "n", 2, &result), DPL_OK);
  EXPECT_EQ(result, 7);
  EXPECT_EQ(store->add(store->context, nullptr, 1, &result), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(store->last_error(store->context), "store add: key or result is NULL");
}

TEST(JoinTest, BarrierReleasesAllRanksAndReportsWhoIsMissing) {
  auto server = StartServer();
  constexpr int kRanks = 5;
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&] {
      auto client = MustConnect(server->port());
      EXPECT_TRUE(Barrier(*client, AttemptPrefix(0), "b", kRanks, 5s).ok());
    });
  }
  for (auto& rank : ranks) rank.join();
  auto client = MustConnect(server->port());
  EXPECT_EQ(Barrier(*client, AttemptPrefix(1), "b", 2, 20ms).message(),
            "barrier 'b': 1 of 2 ranks arrived: timed out after 0.02 s waiting for store key(s) "
            "'attempt/1/barrier/b/done'");
}

TEST(JoinTest, TheFirstPublishedFailureWins) {
  auto server = StartServer();
  auto client = MustConnect(server->port());
  const std::string prefix = AttemptPrefix(0);
  EXPECT_FALSE(CheckFailure(*client, prefix)->has_value());
  ASSERT_TRUE(PublishFailure(*client, prefix, "rank 3 failed").ok());
  ASSERT_TRUE(PublishFailure(*client, prefix, "rank 1 failed later").ok());
  EXPECT_EQ(CheckFailure(*client, prefix)->value(), "rank 3 failed");
  EXPECT_FALSE(CheckFailure(*client, AttemptPrefix(1))->has_value());
}

}  // namespace
}  // namespace dpl::rendezvous
