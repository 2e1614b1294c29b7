#include "training/stragglers.hpp"

#include <algorithm>
#include <cstdio>

namespace dpl::training {
namespace {

// Steps waiting for some rank's time: beyond this many the oldest go (a rank that stopped posting
// must not grow rank 0's memory).
constexpr size_t kMaxPendingSteps = 4096;
// Note [Stragglers]: slower by less than this is not a straggler, whatever the factor.
constexpr double kLeastStragglerSeconds = 0.010;

double LowerMedian(std::vector<double> values) {
  const size_t middle = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(middle), values.end());
  return values[middle];
}

}  // namespace

std::string DescribeStraggler(const StragglerEvent& event, double factor) {
  char times[200];
  std::snprintf(times, sizeof times,
                "%.1f ms of compute a step against the median rank's %.1f ms, %.1fx "
                "(--straggler-factor %g), over steps %lld-%lld",
                event.seconds * 1e3, event.median_seconds * 1e3,
                event.seconds / std::max(event.median_seconds, 1e-9), factor,
                static_cast<long long>(event.first_step), static_cast<long long>(event.last_step));
  return "rank " + std::to_string(event.rank) + " on machine " + std::to_string(event.machine) +
         " (host " + event.host + ")" +
         (event.straggling ? " is a straggler: " : " is no longer a straggler: ") + times;
}

StragglerWatch::StragglerWatch(int world_size, double factor, int steps)
    : world_size_(world_size), factor_(factor), steps_(steps), ranks_(size_t(world_size)) {}

void StragglerWatch::Add(const RankStepTimes& times) {
  if (times.rank < 0 || times.rank >= world_size_) return;
  RankState& rank = ranks_[size_t(times.rank)];
  rank.machine = times.machine;
  rank.host = times.host;
  for (const auto& [step, seconds] : times.seconds_of_step) {
    if (step <= compared_) continue;
    auto [entry, added] = pending_.try_emplace(step, size_t(world_size_), -1.0);
    entry->second[size_t(times.rank)] = seconds;
  }
  while (pending_.size() > kMaxPendingSteps) pending_.erase(pending_.begin());
}

std::vector<StragglerEvent> StragglerWatch::Compare() {
  std::vector<StragglerEvent> events;
  // The newest step every rank's time has come for: any step before it that is still missing a
  // time will not get it (each rank posts its newest steps together).
  int64_t newest_complete = -1;
  for (const auto& [step, times] : pending_) {
    if (std::none_of(times.begin(), times.end(), [](double t) { return t < 0.0; })) {
      newest_complete = step;
    }
  }
  while (!pending_.empty() && pending_.begin()->first <= newest_complete) {
    const int64_t step = pending_.begin()->first;
    const std::vector<double> times = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    compared_ = step;
    if (std::any_of(times.begin(), times.end(), [](double t) { return t < 0.0; })) continue;
    const double median = LowerMedian(times);
    for (int r = 0; r < world_size_; ++r) {
      RankState& rank = ranks_[size_t(r)];
      const double own = times[size_t(r)];
      const bool slow = own > factor_ * median && own - median > kLeastStragglerSeconds;
      // A named rank counts the steps it is back within the factor; the others the slow ones.
      if (slow == rank.named) {
        rank.run = 0;
        rank.own.clear();
        rank.median.clear();
        continue;
      }
      if (rank.run++ == 0) rank.run_start = step;
      rank.own.push_back(own);
      rank.median.push_back(median);
      if (rank.run < steps_) continue;
      rank.named = !rank.named;
      events.push_back({r, rank.machine, rank.host, rank.named, rank.run_start, step,
                        LowerMedian(rank.own), LowerMedian(rank.median)});
      rank.run = 0;
      rank.own.clear();
      rank.median.clear();
    }
  }
  return events;
}

StragglerCheck::StragglerCheck(StepTimeSharing* sharing, int rank, int world_size,
                               const StragglerOptions& options)
    : sharing_(sharing) {
  if (sharing_ != nullptr && rank == 0) {
    watch_ = std::make_unique<StragglerWatch>(world_size, options.factor, options.steps);
  }
}

std::vector<StragglerEvent> StragglerCheck::AfterStep(int64_t global_step, double compute_seconds) {
  if (sharing_ == nullptr) return {};
  sharing_->Record(global_step, compute_seconds - compute_seconds_);
  compute_seconds_ = compute_seconds;
  if (!watch_) return {};
  for (const RankStepTimes& times : sharing_->Collect()) watch_->Add(times);
  return watch_->Compare();
}

}  // namespace dpl::training
