// The link test's plan and what it tells: the round-robin rounds (every two players once, nobody
// twice in a round), the table with the slowest link named, and the warnings of --preflight for
// a link more than twice the median of its kind (Note [Slow links]).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "worker/link_report.hpp"
#include "worker/link_test.hpp"

namespace dpl::worker {
namespace {

TEST(LinkTestPlan, RoundRobinMeetsEveryTwoPlayersOnceAndNobodyTwiceARound) {
  EXPECT_TRUE(RoundRobin(0).empty());
  EXPECT_TRUE(RoundRobin(1).empty());
  for (int players = 2; players <= 9; ++players) {
    const auto rounds = RoundRobin(players);
    EXPECT_EQ(rounds.size(), size_t(players % 2 == 0 ? players - 1 : players)) << players;
    std::set<std::pair<int, int>> met;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_GE(a, 0);
        EXPECT_LT(b, players);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << players << " players";
        EXPECT_TRUE(met.insert({a, b}).second) << a << "-" << b << " twice";
      }
      EXPECT_EQ(round.size(), size_t(players / 2));
    }
    EXPECT_EQ(met.size(), size_t(players * (players - 1) / 2)) << players;
  }
}

LinkMeasurement Link(int a, int b, bool within, double latency_ms, double megabytes_per_s) {
  LinkMeasurement link;
  link.rank_a = a;
  link.rank_b = b;
  link.within_machine = within;
  link.latency_s = latency_ms / 1e3;
  link.bandwidth_bytes_s = megabytes_per_s * 1e6;
  return link;
}

// Three machines of two workers: links 0-2, 0-4 and 2-4 between them, 0-1, 2-3, 4-5 within.
LinkReport ThreeMachines(double slow_latency_ms, double slow_megabytes_per_s) {
  LinkReport report;
  report.backend = "tcp";
  report.hosts = {"a (10.0.0.1)", "b (10.0.0.2)", "c (10.0.0.3)"};
  report.workers_per_machine = 2;
  report.seconds = 1.5;
  report.links = {Link(0, 2, false, 0.2, 1000),
                  Link(0, 4, false, 0.25, 900),
                  Link(2, 4, false, slow_latency_ms, slow_megabytes_per_s),
                  Link(0, 1, true, 0.05, 3000),
                  Link(2, 3, true, 0.05, 2800),
                  Link(4, 5, true, 0.06, 3100)};
  return report;
}

TEST(LinkReport, TheTableNamesEveryLinkAndTheSlowest) {
  const LinkReport report = ThreeMachines(20.0, 2.5);
  EXPECT_EQ(LinkName(report, report.links[2]), "b (10.0.0.2) <-> c (10.0.0.3)");
  EXPECT_EQ(LinkName(report, report.links[4]), "b (10.0.0.2) worker 0 <-> worker 1");
  const std::vector<std::string> table = LinkTable(report, LinkRows::kAll);
  const std::vector<std::string> expected = {
      "link test through backend tcp: 6 links in 1.50 s (latency: the median round of a "
      "one-float allreduce; bandwidth: a broadcast's, in the slower direction)",
      "  link                                    latency      bandwidth",
      "  a (10.0.0.1) <-> b (10.0.0.2)          0.200 ms    1000.0 MB/s",
      "  a (10.0.0.1) <-> c (10.0.0.3)          0.250 ms     900.0 MB/s",
      "  b (10.0.0.2) <-> c (10.0.0.3)         20.000 ms       2.5 MB/s",
      "  a (10.0.0.1) worker 0 <-> worker 1     0.050 ms    3000.0 MB/s",
      "  b (10.0.0.2) worker 0 <-> worker 1     0.050 ms    2800.0 MB/s",
      "  c (10.0.0.3) worker 0 <-> worker 1     0.060 ms    3100.0 MB/s",
      "slowest link: b (10.0.0.2) <-> c (10.0.0.3): latency 20.000 ms, bandwidth 2.5 MB/s, 1 MiB "
      "in 439.430 ms"};
  EXPECT_EQ(table, expected);
  EXPECT_EQ(LinkTable(report, LinkRows::kNone),
            (std::vector<std::string>{expected.front(), expected.back()}));
}

TEST(LinkReport, ALinkTwiceTheMedianOfItsKindIsSlow) {
  // By its bandwidth: 1 MiB in 439.4 ms against the median's 1.415 ms (0.25 ms + 1 MiB at 900
  // MB/s).
  std::vector<std::string> warnings = SlowLinkWarnings(ThreeMachines(20.0, 2.5));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(
      warnings[0],
      "slow link: b (10.0.0.2) <-> c (10.0.0.3): latency 20.000 ms, bandwidth 2.5 MB/s, 1 MiB "
      "in 439.430 ms, 310.5x the median of the 3 links between machines (1.415 ms)");
  // By its latency alone.
  warnings = SlowLinkWarnings(ThreeMachines(5.0, 1000));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("slow link: b (10.0.0.2) <-> c (10.0.0.3): latency 5.000 ms", 0), 0u)
      << warnings[0];
  // Within twice the median: none; the links within machines are not compared with the others.
  EXPECT_TRUE(SlowLinkWarnings(ThreeMachines(0.3, 700)).empty());
  // A link within a machine compared with the other machines' own.
  LinkReport report = ThreeMachines(0.3, 700);
  report.links[5] = Link(4, 5, true, 0.06, 100);
  warnings = SlowLinkWarnings(report);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("slow link: c (10.0.0.3) worker 0 <-> worker 1: ", 0), 0u)
      << warnings[0];
  EXPECT_NE(warnings[0].find("the median of the 3 links within machines"), std::string::npos);
}

TEST(LinkReport, TwoLinksOfAKindHaveNoMedianToCompareWith) {
  LinkReport report = ThreeMachines(20.0, 2.5);
  report.links.erase(report.links.begin());  // two links between machines left
  EXPECT_TRUE(SlowLinkWarnings(report).empty());
}

TEST(LinkReport, ASkippedTestSaysWhy) {
  LinkReport report;
  report.skipped = "one worker, no link";
  EXPECT_EQ(LinkTable(report, LinkRows::kAll),
            std::vector<std::string>{"link test: none measured: one worker, no link"});
  EXPECT_FALSE(SlowestLink(report).has_value());
}

}  // namespace
}  // namespace dpl::worker
