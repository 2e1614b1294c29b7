// What one store operation costs, on loopback: the built-in store, and etcd clusters of 1 and 3
// members started here (when etcd is installed). Not a test: docs/store.md holds its figures.
//
//   rendezvous_store_latency [ROUNDS]
//
// etcd's data in memory (/dev/shm) and on disk (/var/tmp). Per store, the median and 90th
// percentile of ROUNDS (default 500) get, set, add and wait calls of one client (a get and a wait
// of a key that exists), and of a wait released by another client's set (from just before the set
// until the waiter returns).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "etcd_cluster.hpp"
#include "rendezvous/join.hpp"
#include "rendezvous/store.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using dpl::rendezvous::StoreClient;
using dpl::rendezvous::StoreClientOptions;

struct Figures {
  double median_ms = 0;
  double p90_ms = 0;
};

Figures Summarise(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples[samples.size() * 9 / 10]};
}

Figures Time(int rounds, const std::function<void(int)>& call) {
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    call(i);
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return Summarise(samples);
}

// From just before one client's set until another client's wait for that key returns.
Figures TimeWakeUps(int rounds, StoreClient& waiter, StoreClient& setter) {
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const std::string key = "wake/" + std::to_string(i);
    std::promise<Clock::time_point> set_at;
    auto woken = std::async(std::launch::async, [&] {
      if (!waiter.Wait({key}, 10s).ok()) std::abort();
      return Clock::now();
    });
    std::this_thread::sleep_for(2ms);  // the waiter is blocked by now
    const auto start = Clock::now();
    if (!setter.Set(key, {1}).ok()) std::abort();
    samples.push_back(std::chrono::duration<double, std::milli>(woken.get() - start).count());
  }
  return Summarise(samples);
}

void Measure(const std::string& name, const StoreClientOptions& options, int rounds) {
  auto client = StoreClient::Connect(options);
  auto other = StoreClient::Connect(options);
  if (!client.ok() || !other.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(),
                 (client.ok() ? other.status() : client.status()).message().c_str());
    std::exit(1);
  }
  StoreClient& c = **client;
  const std::vector<uint8_t> value(64, 7);
  auto must = [](const dpl::Status& status) {
    if (!status.ok()) std::abort();
  };
  must(c.Set("present", value));
  const Figures set = Time(rounds, [&](int i) { must(c.Set("k/" + std::to_string(i), value)); });
  const Figures get = Time(rounds, [&](int) { must(c.Get("present", 0ms).status()); });
  const Figures add = Time(rounds, [&](int) { must(c.Add("counter", 1).status()); });
  const Figures wait = Time(rounds, [&](int) { must(c.Wait({"present"}, 0ms)); });
  const Figures wake = TimeWakeUps(std::max(rounds / 5, 10), **other, c);
  std::printf(
      "%-18s set %6.3f (%6.3f)  get %6.3f (%6.3f)  add %6.3f (%6.3f)  wait %6.3f (%6.3f)  "
      "woken %6.3f (%6.3f)\n",
      name.c_str(), set.median_ms, set.p90_ms, get.median_ms, get.p90_ms, add.median_ms, add.p90_ms,
      wait.median_ms, wait.p90_ms, wake.median_ms, wake.p90_ms);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(10, std::atoi(argv[1])) : 500;
  std::printf("milliseconds per call, median (90th percentile), %d rounds\n", rounds);
  dpl::rendezvous::StoreServerOptions server_options;
  server_options.bind_addr = "127.0.0.1";
  auto server = dpl::rendezvous::StoreServer::Start(server_options);
  if (!server.ok()) return 1;
  StoreClientOptions builtin;
  builtin.host = "127.0.0.1";
  builtin.port = (*server)->port();
  Measure("built-in", builtin, rounds);
  if (!dpl::rendezvous::testing::EtcdCluster::Installed()) {
    std::printf("etcd is not installed: no etcd figures\n");
    return 0;
  }
  // In memory, then on the disk of /var/tmp, where every write waits for an fsync.
  for (const auto& [members, where] : std::vector<std::pair<int, std::string>>{
           {1, "/dev/shm"}, {3, "/dev/shm"}, {1, "/var/tmp"}, {3, "/var/tmp"}}) {
    dpl::rendezvous::testing::EtcdCluster cluster(members, where);
    if (!cluster.started()) {
      std::fprintf(stderr, "%s\n", cluster.error().c_str());
      return 1;
    }
    StoreClientOptions etcd;
    etcd.etcd_endpoints = cluster.Endpoints();
    Measure("etcd " + std::to_string(members) + (where == "/dev/shm" ? " shm" : " disk"), etcd,
            rounds);
  }
  return 0;
}
