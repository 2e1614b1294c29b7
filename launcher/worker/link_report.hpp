// What the link test (worker/link_test.hpp) found, and how it is told: the table of every link
// with the slowest named, and the warnings of --preflight.
//
// Note [Slow links]
// One figure ranks the links: the time to move 1 MiB (DDP's first gradient bucket), the round's
// latency plus 1 MiB at the link's bandwidth, so a link slow by its latency and one slow by its
// bandwidth count alike. The slowest link is the one of the longest time. A link is slow when
// its time is more than kSlowFactor (2) times the median of its kind: links between machines are
// compared with each other, links within a machine with each other (a machine's own links are
// always far faster than its network). A median says something from three links of a kind on:
// two machines have one link between them, and three or more machines are needed to find theirs
// slow.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dpl::worker {

inline constexpr double kSlowFactor = 2.0;
inline constexpr double kReferenceBytes = 1024.0 * 1024.0;
inline constexpr size_t kLeastLinksForMedian = 3;

struct LinkMeasurement {
  int rank_a = 0;  // the link's two ranks, rank_a < rank_b
  int rank_b = 0;
  bool within_machine = false;
  double latency_s = 0.0;        // the median round of a one-float allreduce
  double bandwidth_bytes_s = 0;  // a broadcast's, in the slower direction
  // Note [Slow links].
  double SecondsForReference() const;
};

struct LinkReport {
  std::string backend;             // the plugin's name
  std::vector<std::string> hosts;  // per machine: "name (address)"
  int workers_per_machine = 1;
  std::vector<LinkMeasurement> links;
  std::string skipped;   // why no link was measured; "" when they were
  double seconds = 0.0;  // how long the test took
};

// The median of `values` (not empty).
double MedianOf(std::vector<double> values);

// "node1 (10.0.0.1) <-> node2 (10.0.0.2)", or "node1 (10.0.0.1) worker 0 <-> worker 1".
std::string LinkName(const LinkReport& report, const LinkMeasurement& link);

// The slowest link (Note [Slow links]); nothing without links.
std::optional<LinkMeasurement> SlowestLink(const LinkReport& report);

// Lines of text: a heading, one row per link (its name, latency, bandwidth), then the slowest
// link. With `rows` false, the heading and the slowest link only.
enum class LinkRows { kAll, kNone };
std::vector<std::string> LinkTable(const LinkReport& report, LinkRows rows);

// One warning per slow link (Note [Slow links]), naming both ends, its figures and the median's.
std::vector<std::string> SlowLinkWarnings(const LinkReport& report);

}  // namespace dpl::worker
