// The store against hostile, broken and vanished peers: descriptor and thread leaks, frames that
// never complete, silent servers, a stopped server process, port probes. The servers whose
// descriptors, threads, memory or log are measured run in a child process
// (test_store_server.cpp); a test whose call could hang on a broken build runs that call on
// another thread and declares the peer last, so that destroying the peer unblocks it.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>

#include "descriptor_limit.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/log_limiter.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/wire_protocol.hpp"
#include "store_test_support.hpp"

namespace dpl::rendezvous {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::Eventually;
using testing::HelloFrame;
using testing::RawConnection;
using testing::ServerProcess;
using testing::SilentListener;

StoreClientOptions ClientOptions(int port, std::chrono::milliseconds connect_timeout,
                                 std::chrono::milliseconds call_timeout) {
  StoreClientOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.connect_timeout = connect_timeout;
  options.call_timeout = call_timeout;
  return options;
}

std::unique_ptr<StoreClient> MustConnect(int port,
                                         std::chrono::milliseconds call_timeout = 2000ms) {
  auto client = StoreClient::Connect(ClientOptions(port, 5000ms, call_timeout));
  EXPECT_TRUE(client.ok()) << client.status().message();
  return client.ok() ? std::move(*client) : nullptr;
}

std::string Where(int port) {
  return "127.0.0.1:" + std::to_string(port);
}

// Connects a real client on another thread (a broken build hangs there; the caller's peer
// unblocks it when destroyed) and checks it can set and get a key.
void ExpectARealClientWorks(int port) {
  auto connected = std::async(std::launch::async, [port] {
    auto client = StoreClient::Connect(ClientOptions(port, 5000ms, 2000ms));
    if (!client.ok()) return client.status();
    DPL_RETURN_IF_ERROR((*client)->Set("k", ToBytes("v")));
    auto value = (*client)->Get("k", 0ms);
    if (!value.ok()) return value.status();
    return FromBytes(*value) == "v" ? Status::Ok() : Status::Error("read back the wrong value");
  });
  ASSERT_EQ(connected.wait_for(8s), std::future_status::ready) << "a real client hangs";
  Status status = connected.get();
  EXPECT_TRUE(status.ok()) << status.message();
}

// Two launchers join a job through the store as real machines do: machine 0 by its id, the other
// without one, given the next id in join order (on another thread, as above).
void ExpectTwoMachinesJoin(int port) {
  auto joined = std::async(std::launch::async, [port]() -> Result<int> {
    LauncherJoin join;
    join.num_machines = 2;
    join.settings = {{"--num-machines", "2"}, {"--num-processes", "1"}};
    auto machine0 = StoreClient::Connect(ClientOptions(port, 5000ms, 2000ms));
    if (!machine0.ok()) return machine0.status();
    join.machine_id = 0;
    join.machine_name = "machine-a";
    auto first = JoinAsLauncher(**machine0, join, 2000ms);
    if (!first.ok() || *first != 0) return first;
    auto machine1 = StoreClient::Connect(ClientOptions(port, 5000ms, 2000ms));
    if (!machine1.ok()) return machine1.status();
    join.machine_id.reset();
    join.machine_name = "machine-b";
    return JoinAsLauncher(**machine1, join, 2000ms);
  });
  ASSERT_EQ(joined.wait_for(8s), std::future_status::ready) << "joining the job hangs";
  Result<int> id = joined.get();
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(*id, 1);
}

// The store server process's resources are back where they were before the peers came: the same
// descriptors and threads, and resident memory within `slack` (allocator caches).
void ExpectBackToBaseline(const ServerProcess& server, size_t descriptors, size_t threads,
                          size_t resident, size_t slack, std::chrono::milliseconds within) {
  EXPECT_TRUE(Eventually(
      [&] {
        return server.OpenDescriptors() == descriptors && server.Threads() == threads &&
               server.ResidentBytes() <= resident + slack;
      },
      within))
      << "descriptors " << descriptors << " -> " << server.OpenDescriptors() << ", threads "
      << threads << " -> " << server.Threads() << ", resident bytes " << resident << " -> "
      << server.ResidentBytes();
}

TEST(StoreRobustnessTest, ConnectCloseCyclesLeaveNoDescriptorOrThreadBehind) {
  // More cycles than the server may hold descriptors: one leaked per cycle would exhaust them.
  constexpr int kCycles = 20000;
  ServerProcess server({"--max-open-files", "256", "--handshake-ms", "1000"});
  ASSERT_TRUE(server.started());
  const size_t descriptors = server.OpenDescriptors();
  const size_t threads = server.Threads();
  const size_t resident = server.ResidentBytes();
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    RawConnection probe(server.port());
    ASSERT_TRUE(probe.connected()) << "cycle " << cycle;
    if (cycle % 2 == 1) probe.Reset();  // half of them end with a reset, half with a FIN
  }
  // Within the handshake deadline (1 s) and a margin; a leak of one stack or buffer per
  // connection would be hundreds of MiB here, so 8 MiB of allocator caches tells them apart.
  ExpectBackToBaseline(server, descriptors, threads, resident, size_t{8} << 20, 3s);
  if (HasFailure()) return;
  ExpectARealClientWorks(server.port());
  ExpectTwoMachinesJoin(server.port());
  // Closed probes say nothing; refusals beyond the pending-handshake bound a few lines at most.
  EXPECT_LE(server.StderrLines(), 6u) << server.Stderr().substr(0, 2000);
}

TEST(StoreRobustnessTest, RunningOutOfDescriptorsBacksOffTheAcceptLoopAndLogsOnce) {
  ServerProcess server({"--max-open-files", "32", "--handshake-ms", "60000"});
  ASSERT_TRUE(server.started());
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 48; ++i) held.push_back(std::make_unique<RawConnection>(server.port()));
  ASSERT_TRUE(Eventually(
      [&] { return server.Stderr().find("Too many open files") != std::string::npos; }, 3s))
      << server.Stderr();
  const auto cpu_before = server.CpuTime();
  std::this_thread::sleep_for(1s);
  EXPECT_LT(server.CpuTime() - cpu_before, 200ms) << "the accept loop spins";
  EXPECT_EQ(server.StderrLines(), 1u) << server.Stderr().substr(0, 2000);
  if (HasFailure()) return;
  held.clear();
  ExpectARealClientWorks(server.port());
  EXPECT_EQ(server.StderrLines(), 1u) << server.Stderr();
}

TEST(StoreRobustnessTest, FramesThatNeverCompleteHoldNoMemoryAndCloseAtTheFrameDeadline) {
  constexpr int kConnections = 8;
  constexpr auto kFrameTimeout = 1000ms;
  ServerProcess server({"--frame-ms", "1000"});
  ASSERT_TRUE(server.started());
  const size_t descriptors = server.OpenDescriptors();
  const size_t threads = server.Threads();
  const size_t resident_before = server.ResidentBytes();
  std::vector<std::unique_ptr<RawConnection>> stalled;
  const std::vector<uint8_t> ok_reply = {static_cast<uint8_t>(wire::Op::kOk), 0, 0, 0, 0};
  std::vector<uint8_t> header = {static_cast<uint8_t>(wire::Op::kSet), 0, 0, 0, 0};
  std::memcpy(&header[1], &wire::kMaxBodyBytes, sizeof wire::kMaxBodyBytes);
  const auto sent = Clock::now();
  for (int i = 0; i < kConnections; ++i) {
    stalled.push_back(std::make_unique<RawConnection>(server.port()));
    ASSERT_TRUE(stalled.back()->Send(HelloFrame()));
    ASSERT_EQ(stalled.back()->Receive(ok_reply.size(), 2s), ok_reply);
    ASSERT_TRUE(stalled.back()->Send(header));  // announces 64 MiB, sends none of it
  }
  size_t resident_peak = resident_before;
  std::vector<bool> closed(kConnections, false);
  const bool all_closed = Eventually(
      [&] {
        resident_peak = std::max(resident_peak, server.ResidentBytes());
        bool all = true;
        for (int i = 0; i < kConnections; ++i) {
          if (!closed[i]) closed[i] = stalled[i]->ClosedWithin(0ms);
          all = all && closed[i];
        }
        return all;
      },
      kFrameTimeout + 3s);
  const auto elapsed = Clock::now() - sent;
  EXPECT_TRUE(all_closed) << "a stalled frame outlived its deadline";
  EXPECT_GE(elapsed, kFrameTimeout - 50ms);
  EXPECT_LT(resident_peak - resident_before, size_t{wire::kMaxBodyBytes})
      << "the server holds memory for bodies that never came";
  stalled.clear();
  ExpectBackToBaseline(server, descriptors, threads, resident_before, size_t{8} << 20, 3s);
  ExpectARealClientWorks(server.port());
  ExpectTwoMachinesJoin(server.port());
}

TEST(StoreRobustnessTest, HandshakesThatNeverCompleteCloseAtTheHandshakeDeadline) {
  StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.handshake_timeout = 500ms;
  auto server = StoreServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const auto start = Clock::now();
  RawConnection silent((*server)->port());
  RawConnection partial((*server)->port());
  ASSERT_TRUE(partial.Send({0x01, 100, 0, 0, 0, 1, 2, 3}));  // a hello whose body stops short
  EXPECT_TRUE(silent.ClosedWithin(3s));
  EXPECT_TRUE(partial.ClosedWithin(3s));
  EXPECT_GE(Clock::now() - start, options.handshake_timeout - 50ms);
}

TEST(StoreRobustnessTest, AFullTableOfPendingHandshakesEvictsTheOldest) {
  StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.handshake_timeout = 60000ms;  // none expires during the test: only eviction closes
  options.max_pending_handshakes = 4;
  auto server = StoreServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  std::vector<std::unique_ptr<RawConnection>> connections;
  for (int i = 0; i < 10; ++i) {
    connections.push_back(std::make_unique<RawConnection>(port));
    ASSERT_TRUE(connections.back()->connected());
    // Accepted in this order: the server has taken each before the next comes.
    std::this_thread::sleep_for(20ms);
  }
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(connections[i]->ClosedWithin(1000ms)) << i;
  for (int i = 6; i < 10; ++i) EXPECT_FALSE(connections[i]->ClosedWithin(0ms)) << i;
  // A real client gets in at once, although every place is taken: it evicts the oldest.
  const auto start = Clock::now();
  ExpectARealClientWorks(port);
  EXPECT_LT(Clock::now() - start, 1000ms);
  EXPECT_TRUE(connections[6]->ClosedWithin(1000ms));
  for (int i = 7; i < 10; ++i) EXPECT_FALSE(connections[i]->ClosedWithin(0ms)) << i;
}

// Slowloris: a thousand connections held open idle or with half-sent handshakes cost the server
// at most its bound of pending handshakes in descriptors, and a machine still joins within 2 s.
TEST(StoreRobustnessTest, ASlowlorisFloodOfAThousandConnectionsLetsAMachineJoinWithin2s) {
  constexpr int kFlood = 1000;
  const std::string too_few = testing::AllowDescriptors(kFlood + 200);
  if (!too_few.empty()) GTEST_SKIP() << too_few;
  ServerProcess server;
  ASSERT_TRUE(server.started());
  const size_t descriptors = server.OpenDescriptors();
  std::vector<uint8_t> partial_hello = HelloFrame();
  partial_hello.resize(partial_hello.size() - 2);
  std::vector<std::unique_ptr<RawConnection>> flood;
  for (int i = 0; i < kFlood; ++i) {
    flood.push_back(std::make_unique<RawConnection>(server.port()));
    ASSERT_TRUE(flood.back()->connected()) << "connection " << i;
    if (i % 10 < 6) continue;  // 60% idle, 20% 3 bytes of a header, 20% most of a hello
    const std::vector<uint8_t> header_start = {0x01, 0x10, 0x00};
    ASSERT_TRUE(flood.back()->Send(i % 10 < 8 ? header_start : partial_hello));
  }
  const auto start = Clock::now();
  ExpectTwoMachinesJoin(server.port());
  const auto joined = Clock::now() - start;
  EXPECT_LT(joined, 2000ms) << "joining took "
                            << std::chrono::duration_cast<std::chrono::milliseconds>(joined).count()
                            << " ms";
  EXPECT_LE(server.OpenDescriptors(), descriptors + kDefaultMaxPendingHandshakes + 4);
  EXPECT_LE(server.StderrLines(), 6u) << server.Stderr().substr(0, 2000);
}

TEST(StoreRobustnessTest, IdleClientsOutliveTheHandshakeAndFrameDeadlines) {
  StoreServerOptions options;
  options.bind_addr = "127.0.0.1";
  options.handshake_timeout = 200ms;
  options.frame_timeout = 200ms;
  auto server = StoreServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto client = MustConnect((*server)->port());
  ASSERT_TRUE(client);
  std::this_thread::sleep_for(700ms);
  ASSERT_TRUE(client->Set("k", ToBytes("v")).ok());
  EXPECT_EQ(FromBytes(*client->Get("k", 0ms)), "v");
}

TEST(StoreRobustnessTest, KeepaliveIsArmedOnBothEndsOfAConnection) {
  StoreServerOptions server_options;
  server_options.bind_addr = "127.0.0.1";
  server_options.keepalive_timeout = 6000ms;
  auto server = StoreServer::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();
  StoreClientOptions client_options = ClientOptions(port, 2000ms, 2000ms);
  client_options.keepalive_timeout = 6000ms;
  auto client = StoreClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status().message();
  ASSERT_TRUE((*client)->Set("k", {}).ok());
  // Probing starts after half the timeout without traffic. Right after the call a retransmit or
  // loss-probe timer may still stand for the last reply; the keepalive timer follows it.
  constexpr int kKeepaliveTimer = 2;
  auto keepalive_armed = [](int local_port, int remote_port) {
    const auto timer = testing::FindTcpTimer(local_port, remote_port);
    return timer && timer->kind == kKeepaliveTimer && timer->remaining <= 3000ms;
  };
  EXPECT_TRUE(Eventually([&] { return keepalive_armed(port, 0); }, 2s)) << "on the server's end";
  EXPECT_TRUE(Eventually([&] { return keepalive_armed(0, port); }, 2s)) << "on the client's end";
}

TEST(StoreRobustnessTest, AListenerThatNeverAnswersTheHandshakeFailsWithinTheConnectTimeout) {
  std::future<Result<std::unique_ptr<StoreClient>>> connecting;
  SilentListener listener(/*answer_handshake=*/false);
  ASSERT_GT(listener.port(), 0);
  const auto start = Clock::now();
  connecting = std::async(std::launch::async, [&] {
    return StoreClient::Connect(ClientOptions(listener.port(), 500ms, 2000ms));
  });
  ASSERT_EQ(connecting.wait_for(3s), std::future_status::ready) << "the handshake hangs";
  const auto elapsed = Clock::now() - start;
  auto client = connecting.get();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), DPL_ERR_TIMEOUT);
  EXPECT_EQ(client.status().message(),
            "the rendezvous store at " + Where(listener.port()) +
                " accepted the connection but did not answer the handshake within 0.5 s; check "
                "that --master-port is the store's port and that the launcher of --machine-id 0 "
                "is not stopped");
  EXPECT_GE(elapsed, 500ms);
  EXPECT_LT(elapsed, 1500ms);
}

TEST(StoreRobustnessTest, AServerThatStopsAnsweringFailsTheCallAtItsDeadlineAndBreaksTheClient) {
  std::unique_ptr<StoreClient> setter, getter;
  std::future<Status> call;
  SilentListener listener(/*answer_handshake=*/true);
  const int port = listener.port();
  setter = MustConnect(port, 300ms);
  getter = MustConnect(port, 300ms);
  ASSERT_TRUE(setter && getter);

  auto start = Clock::now();
  call = std::async(std::launch::async, [&] { return setter->Set("k", ToBytes("v")); });
  ASSERT_EQ(call.wait_for(3s), std::future_status::ready) << "set hangs";
  auto elapsed = Clock::now() - start;
  Status status = call.get();
  const std::string unresponsive = "the rendezvous store at " + Where(port) + " is unresponsive: ";
  const std::string why =
      "; the launcher of --machine-id 0 is stopped or overloaded, or the network to it is down";
  EXPECT_EQ(status.code(), DPL_ERR_TIMEOUT);
  EXPECT_EQ(status.message(), unresponsive + "no reply to set 'k' within 0.3 s" + why);
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 1500ms);
  Status later = setter->Add("n", 1).status();
  EXPECT_EQ(later.code(), DPL_ERR_COMMUNICATION);
  EXPECT_EQ(later.message(), "the connection to the rendezvous store at " + Where(port) +
                                 " is unusable after an earlier failure: " + status.message());

  // A blocking get may take its own timeout plus the call timeout.
  start = Clock::now();
  call = std::async(std::launch::async, [&] { return getter->Get("k", 200ms).status(); });
  ASSERT_EQ(call.wait_for(3s), std::future_status::ready) << "get hangs";
  elapsed = Clock::now() - start;
  status = call.get();
  EXPECT_EQ(status.code(), DPL_ERR_TIMEOUT);
  EXPECT_EQ(status.message(), unresponsive + "no reply to get 'k' within 0.5 s" + why);
  EXPECT_GE(elapsed, 500ms);
  EXPECT_LT(elapsed, 2000ms);
}

TEST(StoreRobustnessTest, AStoppedServerProcessFailsTheCallWithinTheCallDeadline) {
  std::unique_ptr<StoreClient> client;
  std::future<Status> call;
  ServerProcess server;
  ASSERT_TRUE(server.started());
  client = MustConnect(server.port(), 500ms);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Set("before", {}).ok());
  // Its kernel still acknowledges every packet, as across a partition that drops only replies.
  server.Stop();
  const auto start = Clock::now();
  call = std::async(std::launch::async, [&] { return client->Add("counter", 1).status(); });
  ASSERT_EQ(call.wait_for(3s), std::future_status::ready) << "add hangs on a stopped server";
  const auto elapsed = Clock::now() - start;
  Status status = call.get();
  EXPECT_EQ(status.code(), DPL_ERR_TIMEOUT);
  EXPECT_EQ(status.message().rfind("the rendezvous store at " + Where(server.port()) +
                                       " is unresponsive: no reply to add 'counter' within 0.5 s",
                                   0),
            0u)
      << status.message();
  EXPECT_GE(elapsed, 500ms);
  EXPECT_LT(elapsed, 2000ms);
  server.Continue();
}

TEST(StoreRobustnessTest, ProbesLeaveNoLogLineAndAFloodOfBadClientsOnlyAFew) {
  // No bound on pending handshakes here: refusals would be logged and race with the probes.
  ServerProcess server({"--max-pending", "100000"});
  ASSERT_TRUE(server.started());
  const size_t descriptors = server.OpenDescriptors();
  for (int i = 0; i < 300; ++i) {
    RawConnection probe(server.port());
    if (i % 2 == 1) probe.Reset();
  }
  ASSERT_TRUE(Eventually([&] { return server.OpenDescriptors() == descriptors; }, 3s));
  EXPECT_EQ(server.Stderr().substr(0, 2000), "");

  for (int i = 0; i < 40; ++i) {
    RawConnection stranger(server.port());
    ASSERT_TRUE(stranger.Send({0x7e, 0, 0, 0, 0}));
    EXPECT_TRUE(stranger.ClosedWithin(2s));
  }
  const std::string log = server.Stderr();
  EXPECT_EQ(server.StderrLines(), size_t{kConnectionLogBurst}) << log.substr(0, 2000);
  EXPECT_EQ(log.rfind("warning: rendezvous store: closing the connection from 127.0.0.1:", 0), 0u)
      << log.substr(0, 2000);
  EXPECT_NE(log.find(": expected a handshake (op 0x01) but got op 0x7e; not a dpl store client?\n"),
            std::string::npos)
      << log.substr(0, 2000);
}

TEST(LogLimiterTest, LetsABurstThroughPerWindowAndCountsWhatItDropped) {
  LogLimiter limiter(2, 10s);
  const Clock::time_point start{};
  EXPECT_EQ(limiter.Admit("a", start), "a");
  EXPECT_EQ(limiter.Admit("b", start + 1s), "b");
  EXPECT_EQ(limiter.Admit("c", start + 2s), std::nullopt);
  EXPECT_EQ(limiter.Admit("d", start + 9s), std::nullopt);
  EXPECT_EQ(limiter.Admit("e", start + 10s), "e (2 similar messages were suppressed before it)");
  EXPECT_EQ(limiter.Admit("f", start + 11s), "f");
  EXPECT_EQ(limiter.Admit("g", start + 12s), std::nullopt);
  EXPECT_EQ(limiter.Admit("h", start + 30s), "h (1 similar message was suppressed before it)");
}

}  // namespace
}  // namespace dpl::rendezvous
