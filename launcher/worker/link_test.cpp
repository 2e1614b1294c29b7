#include "worker/link_test.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <tuple>

#include "cluster/machine_ids.hpp"
#include "rendezvous/join.hpp"
#include "training/collectives/backend.hpp"
#include "training/host_tensor.hpp"
#include "worker/backend_bootstrap.hpp"

namespace dpl::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Note [Link test]: what one link's measurement may take.
constexpr std::chrono::milliseconds kLatencyBudget{100};
constexpr size_t kLeastLatencyRounds = 5;
constexpr size_t kMostLatencyRounds = 200;
constexpr double kTransferTargetSeconds = 0.02;
constexpr double kBandwidthBudgetSeconds = 0.3;
constexpr size_t kBandwidthRepeats = 3;                       // at the final size
constexpr int64_t kFirstMessageFloats = int64_t(16) << 10;    // 64 KiB
constexpr int64_t kLargestMessageFloats = int64_t(16) << 20;  // 64 MiB

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A link to measure: its two ranks.
struct PlannedLink {
  int rank_a = 0;
  int rank_b = 0;
  bool within_machine = false;
};

// Between machines (their local ranks 0), then within them (all machines at once).
enum class LinkKind { kBetweenMachines, kWithinMachines };

// The links of one kind in the order they are measured: round by round. With `only_rank` >= 0,
// the links of that rank alone.
std::vector<PlannedLink> PlanLinks(LinkKind kind, int machines, int workers, int only_rank) {
  std::vector<PlannedLink> links;
  const auto add = [&](int a, int b, bool within) {
    if (only_rank < 0 || only_rank == a || only_rank == b) links.push_back({a, b, within});
  };
  if (kind == LinkKind::kBetweenMachines) {
    for (const auto& round : RoundRobin(machines)) {
      for (const auto& [i, j] : round) add(i * workers, j * workers, false);
    }
    return links;
  }
  for (const auto& round : RoundRobin(workers)) {
    for (int machine = 0; machine < machines; ++machine) {
      for (const auto& [p, q] : round) add(machine * workers + p, machine * workers + q, true);
    }
  }
  return links;
}

std::string LinkKey(const std::string& prefix, const PlannedLink& link) {
  return prefix + "linktest/link/" + std::to_string(link.rank_a) + "-" +
         std::to_string(link.rank_b);
}

// One allreduce of a float: pair rank 0's `go` (1 or 0) reaches both ranks, who stop together.
Result<bool> AgreeingRound(training::Backend& backend, bool go, double* seconds) {
  float value = go ? 1.0f : 0.0f;
  int64_t one = 1;
  DLTensor tensor = training::HostTensor(&value, kFloat32, 1, &one);
  const Clock::time_point start = Clock::now();
  DPL_RETURN_IF_ERROR(backend.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr));
  *seconds = SecondsSince(start);
  return value > 0.5f;
}

// The median round of a one-float allreduce, as pair rank 0 timed it (0 at pair rank 1).
Result<double> MeasureLatency(training::Backend& backend, int pair_rank) {
  std::vector<double> rounds;
  const Clock::time_point start = Clock::now();
  for (bool go = true; go;) {
    const bool more = rounds.size() < kLeastLatencyRounds ||
                      (rounds.size() < kMostLatencyRounds && Clock::now() - start < kLatencyBudget);
    double seconds = 0;
    DPL_ASSIGN_OR_RETURN(go, AgreeingRound(backend, pair_rank == 0 && more, &seconds));
    rounds.push_back(seconds);
  }
  return pair_rank == 0 ? MedianOf(rounds) : 0.0;
}

// A broadcast of `message` from each rank in turn: how long each took its receiver (by root), the
// same figures on both ranks afterwards.
Result<std::array<double, 2>> TimeBroadcasts(training::Backend& backend, int pair_rank,
                                             std::vector<float>* message) {
  int64_t floats = int64_t(message->size());
  DLTensor tensor = training::HostTensor(message->data(), kFloat32, 1, &floats);
  float took[2] = {0.0f, 0.0f};
  for (int root : {0, 1}) {
    const Clock::time_point start = Clock::now();
    DPL_RETURN_IF_ERROR(backend.Broadcast(&tensor, root, nullptr));
    if (root != pair_rank) took[root] = float(SecondsSince(start));
  }
  int64_t two = 2;
  DLTensor shared = training::HostTensor(took, kFloat32, 1, &two);
  DPL_RETURN_IF_ERROR(backend.Allreduce(&shared, DPL_REDUCE_SUM, nullptr));
  return std::array<double, 2>{std::max(double(took[0]), 1e-9), std::max(double(took[1]), 1e-9)};
}

// Broadcasts of a message growing fourfold until one takes kTransferTargetSeconds (or the largest
// message, or the budget), then twice more at that size: the bytes per second of the slower
// direction in the median of the three. Both ranks see the same figures, and so stop together.
Result<double> MeasureBandwidth(training::Backend& backend, int pair_rank) {
  std::vector<float> message(static_cast<size_t>(kFirstMessageFloats));
  std::vector<double> slower;
  double spent = 0;
  while (slower.size() < kBandwidthRepeats) {
    DPL_ASSIGN_OR_RETURN(auto took, TimeBroadcasts(backend, pair_rank, &message));
    const double time = std::max(took[0], took[1]);
    spent += took[0] + took[1];
    const bool large_enough = time >= kTransferTargetSeconds ||
                              int64_t(message.size()) >= kLargestMessageFloats ||
                              spent >= kBandwidthBudgetSeconds;
    if (!slower.empty() || large_enough) {
      slower.push_back(time);
    } else {
      message.resize(message.size() * 4);
    }
  }
  return double(message.size()) * sizeof(float) / MedianOf(slower);
}

// This rank's side of one link, through a backend instance of the two ranks alone.
Result<LinkMeasurement> MeasureLink(const LinkTestSetup& setup, const PlannedLink& link) {
  const int pair_rank = setup.identity.rank == link.rank_a ? 0 : 1;
  training::WorkerIdentity pair;
  pair.rank = pair_rank;
  pair.world_size = 2;
  pair.local_rank = link.within_machine ? pair_rank : 0;
  pair.local_world_size = link.within_machine ? 2 : 1;
  pair.device_type = kDLCPU;
  const std::string prefix = LinkKey(setup.prefix, link) + "/";
  DPL_ASSIGN_OR_RETURN(ConnectedBackend connected,
                       StartBackend(setup.plugin, *setup.options, pair, *setup.store, prefix));
  training::Backend& backend = *connected.backend;
  DPL_RETURN_IF_ERROR(backend.Barrier());  // both connected before the clock runs
  LinkMeasurement measured;
  measured.rank_a = link.rank_a;
  measured.rank_b = link.rank_b;
  measured.within_machine = link.within_machine;
  DPL_ASSIGN_OR_RETURN(measured.latency_s, MeasureLatency(backend, pair_rank));
  DPL_ASSIGN_OR_RETURN(double bandwidth, MeasureBandwidth(backend, pair_rank));
  DPL_RETURN_IF_ERROR(backend.Barrier());
  measured.bandwidth_bytes_s = bandwidth;
  return measured;
}

std::string ThisHost(const std::string& master_addr) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '?';
  const std::string address = cluster::SourceAddressTowards(master_addr);
  return std::string(name) + (address.empty() ? "" : " (" + address + ")");
}

// Rank 0: every link's figures, as each link's first rank wrote them.
Status ReadLinks(const LinkTestSetup& setup, int machines, int workers, LinkReport* report) {
  std::vector<PlannedLink> links = PlanLinks(LinkKind::kBetweenMachines, machines, workers, -1);
  for (const PlannedLink& link : PlanLinks(LinkKind::kWithinMachines, machines, workers, -1)) {
    links.push_back(link);
  }
  report->links.clear();
  for (const PlannedLink& link : links) {
    auto value = setup.store->Get(LinkKey(setup.prefix, link), setup.timeout);
    if (!value.ok()) return value.status().WithContext("reading the link test's figures");
    LinkMeasurement measured;
    measured.rank_a = link.rank_a;
    measured.rank_b = link.rank_b;
    measured.within_machine = link.within_machine;
    if (std::sscanf(rendezvous::FromBytes(*value).c_str(), "%lf %lf", &measured.latency_s,
                    &measured.bandwidth_bytes_s) != 2) {
      return Status::Error("link test: the figures of ranks " + std::to_string(link.rank_a) +
                           " and " + std::to_string(link.rank_b) + " are not two numbers");
    }
    report->links.push_back(measured);
  }
  std::sort(report->links.begin(), report->links.end(), [](const auto& x, const auto& y) {
    return std::make_tuple(x.within_machine, x.rank_a, x.rank_b) <
           std::make_tuple(y.within_machine, y.rank_a, y.rank_b);
  });
  for (int machine = 0; machine < machines; ++machine) {
    auto host =
        setup.store->Get(setup.prefix + "linktest/host/" + std::to_string(machine), setup.timeout);
    if (!host.ok()) return host.status().WithContext("reading the link test's host names");
    report->hosts.push_back(rendezvous::FromBytes(*host));
  }
  return Status::Ok();
}

// This rank's links of one kind, each measured in turn; the first rank of each writes its figures.
Status MeasureOwnLinks(const LinkTestSetup& setup, LinkKind kind, int machines, int workers,
                       LinkReport* report) {
  const int rank = setup.identity.rank;
  for (const PlannedLink& link : PlanLinks(kind, machines, workers, rank)) {
    Result<LinkMeasurement> measured = MeasureLink(setup, link);
    if (!measured.ok()) {
      return measured.status().WithContext(
          "link test between ranks " + std::to_string(link.rank_a) + " and " +
          std::to_string(link.rank_b) + " (this is " + ThisHost(setup.options->master_addr) + ")");
    }
    report->links.push_back(*measured);
    if (rank != link.rank_a) continue;
    char figures[64];
    std::snprintf(figures, sizeof figures, "%.9g %.9g", measured->latency_s,
                  measured->bandwidth_bytes_s);
    DPL_RETURN_IF_ERROR(
        setup.store->Set(LinkKey(setup.prefix, link), rendezvous::ToBytes(figures)));
  }
  return Status::Ok();
}

// The links between machines, then (once every rank is done with those, so that no link within
// a machine runs beside one of its network) the links within them.
Status MeasureAllLinks(const LinkTestSetup& setup, int machines, int workers, LinkReport* report) {
  DPL_RETURN_IF_ERROR(
      MeasureOwnLinks(setup, LinkKind::kBetweenMachines, machines, workers, report));
  if (machines > 1 && workers > 1) {
    DPL_RETURN_IF_ERROR(rendezvous::Barrier(*setup.store, setup.prefix, "linktest-machines",
                                            setup.identity.world_size, setup.timeout));
  }
  return MeasureOwnLinks(setup, LinkKind::kWithinMachines, machines, workers, report);
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> RoundRobin(int players) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  if (players < 2) return rounds;
  const int seats = players + players % 2;  // an odd count gets a bye: the seat `players`
  std::vector<int> circle(static_cast<size_t>(seats));
  for (int i = 0; i < seats; ++i) circle[size_t(i)] = i;
  for (int round = 0; round < seats - 1; ++round) {
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < seats / 2; ++i) {
      const int a = circle[size_t(i)], b = circle[size_t(seats - 1 - i)];
      if (a < players && b < players) pairs.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(pairs);
    std::rotate(circle.begin() + 1, circle.end() - 1, circle.end());  // seat 0 stays
  }
  return rounds;
}

Result<LinkReport> RunLinkTest(const LinkTestSetup& setup) {
  const Clock::time_point start = Clock::now();
  const training::WorkerIdentity& identity = setup.identity;
  LinkReport report;
  report.backend = setup.plugin.name;
  report.workers_per_machine = std::max(1, identity.local_world_size);
  const int workers = report.workers_per_machine;
  const int machines = identity.world_size / workers;
  if (identity.world_size < 2) {
    report.skipped = "one worker, no link";
    return report;
  }
  if (setup.backend_device_type != kDLCPU) {
    report.skipped = "backend " + setup.plugin.name +
                     " moves device memory here, and the link test moves host memory";
    return report;
  }
  if (identity.local_rank == 0) {
    const std::string key =
        setup.prefix + "linktest/host/" + std::to_string(identity.rank / workers);
    DPL_RETURN_IF_ERROR(
        setup.store->Set(key, rendezvous::ToBytes(ThisHost(setup.options->master_addr))));
  }
  DPL_RETURN_IF_ERROR(MeasureAllLinks(setup, machines, workers, &report));
  if (identity.rank == 0) DPL_RETURN_IF_ERROR(ReadLinks(setup, machines, workers, &report));
  // Nobody trains (or leaves) while another link is still measured.
  DPL_RETURN_IF_ERROR(rendezvous::Barrier(*setup.store, setup.prefix, "linktest-done",
                                          identity.world_size, setup.timeout));
  report.seconds = SecondsSince(start);
  return report;
}

}  // namespace dpl::worker
