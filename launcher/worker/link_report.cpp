#include "worker/link_report.hpp"

#include <algorithm>
#include <cstdio>

namespace dpl::worker {
namespace {

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string Milliseconds(double seconds) {
  return Format("%.3f ms", seconds * 1e3);
}

std::string MegabytesPerSecond(double bytes_per_second) {
  return Format("%.1f MB/s", bytes_per_second / 1e6);
}

std::string Figures(const LinkMeasurement& link) {
  return "latency " + Milliseconds(link.latency_s) + ", bandwidth " +
         MegabytesPerSecond(link.bandwidth_bytes_s) + ", 1 MiB in " +
         Milliseconds(link.SecondsForReference());
}

std::string Host(const LinkReport& report, int rank) {
  const size_t machine = size_t(rank / std::max(1, report.workers_per_machine));
  return machine < report.hosts.size() ? report.hosts[machine]
                                       : "machine " + std::to_string(machine);
}

}  // namespace

double MedianOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

double LinkMeasurement::SecondsForReference() const {
  return latency_s + (bandwidth_bytes_s > 0 ? kReferenceBytes / bandwidth_bytes_s : 0.0);
}

std::string LinkName(const LinkReport& report, const LinkMeasurement& link) {
  const int workers = std::max(1, report.workers_per_machine);
  if (link.within_machine) {
    return Host(report, link.rank_a) + " worker " + std::to_string(link.rank_a % workers) +
           " <-> worker " + std::to_string(link.rank_b % workers);
  }
  return Host(report, link.rank_a) + " <-> " + Host(report, link.rank_b);
}

std::optional<LinkMeasurement> SlowestLink(const LinkReport& report) {
  if (report.links.empty()) return std::nullopt;
  return *std::max_element(report.links.begin(), report.links.end(),
                           [](const LinkMeasurement& a, const LinkMeasurement& b) {
                             return a.SecondsForReference() < b.SecondsForReference();
                           });
}

std::vector<std::string> LinkTable(const LinkReport& report, LinkRows rows) {
  if (!report.skipped.empty()) return {"link test: none measured: " + report.skipped};
  std::vector<std::string> lines = {
      "link test through backend " + report.backend + ": " + std::to_string(report.links.size()) +
      " links in " + Format("%.2f s", report.seconds) +
      " (latency: the median round of a one-float allreduce; bandwidth: a broadcast's, in the "
      "slower direction)"};
  size_t width = 4;
  for (const LinkMeasurement& link : report.links) {
    width = std::max(width, LinkName(report, link).size());
  }
  if (rows == LinkRows::kAll) {
    char line[512];
    std::snprintf(line, sizeof line, "  %-*s %12s %14s", int(width), "link", "latency",
                  "bandwidth");
    lines.push_back(line);
    for (const LinkMeasurement& link : report.links) {
      std::snprintf(line, sizeof line, "  %-*s %12s %14s", int(width),
                    LinkName(report, link).c_str(), Milliseconds(link.latency_s).c_str(),
                    MegabytesPerSecond(link.bandwidth_bytes_s).c_str());
      lines.push_back(line);
    }
  }
  if (const auto slowest = SlowestLink(report)) {
    lines.push_back("slowest link: " + LinkName(report, *slowest) + ": " + Figures(*slowest));
  }
  return lines;
}

std::vector<std::string> SlowLinkWarnings(const LinkReport& report) {
  std::vector<std::string> warnings;
  for (const bool within_machine : {false, true}) {
    std::vector<double> times;
    for (const LinkMeasurement& link : report.links) {
      if (link.within_machine == within_machine) times.push_back(link.SecondsForReference());
    }
    if (times.size() < kLeastLinksForMedian) continue;
    const double median = MedianOf(times);
    const std::string kind =
        std::to_string(times.size()) +
        (within_machine ? " links within machines" : " links between machines");
    for (const LinkMeasurement& link : report.links) {
      const double time = link.SecondsForReference();
      if (link.within_machine != within_machine || !(time > kSlowFactor * median)) continue;
      warnings.push_back("slow link: " + LinkName(report, link) + ": " + Figures(link) + ", " +
                         Format("%.1fx", time / median) + " the median of the " + kind + " (" +
                         Milliseconds(median) + ")");
    }
  }
  return warnings;
}

}  // namespace dpl::worker
