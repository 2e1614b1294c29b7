// Note [Stragglers]: a rank that computes slower than the others holds every step back (each
// waits for its gradients in the reduction), and nothing in the step's own figures says which
// one. So every rank's compute time of each optimizer step (reading its batch and
// forward+backward: the work of its own that the others wait for, not the waits) goes to rank 0,
// which compares them step by step: a rank slower than the median rank (the lower median, so
// that two ranks compare too) by more than --straggler-factor for --straggler-steps steps in a
// row is named, with its machine, in the log, the --metrics file and TensorBoard; and named
// again once it has been within the factor for as many steps. A rank slower by less than 10 ms is
// never a straggler: steps of a few milliseconds on a shared machine are twice as long now and
// then for longer than a few steps (a thread descheduled), which is noise, not a slow machine. The
// times travel through the store off the training thread (StepTimeSharing;
// worker/step_time_exchange.hpp), not in a collective of the step: a step never waits for them, and
// rank 0 compares each step once every rank's time of it has come (a fraction of a second later).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "training/config.hpp"

namespace dpl::training {

// Some of one rank's step times, as they reach rank 0.
struct RankStepTimes {
  int rank = 0;
  int machine = 0;   // the rank's machine in the job (its place: --machine-id)
  std::string host;  // that machine's host name
  std::vector<std::pair<int64_t, double>> seconds_of_step;
};

// How the ranks' step times reach rank 0.
class StepTimeSharing {
 public:
  virtual ~StepTimeSharing() = default;
  // Every rank, after each optimizer step: its compute time of `step`. Never blocks on others.
  virtual void Record(int64_t step, double seconds) = 0;
  // Rank 0: the times that came since the last call (of every rank, its own included).
  virtual std::vector<RankStepTimes> Collect() = 0;
};

// A rank named a straggler, or no longer one.
struct StragglerEvent {
  int rank = 0;
  int machine = 0;
  std::string host;
  bool straggling = true;  // false: back within the factor
  int64_t first_step = 0;  // the steps compared
  int64_t last_step = 0;
  double seconds = 0.0;         // the rank's median compute time over those steps
  double median_seconds = 0.0;  // the median rank's, over the same steps
};

// The log's line for `event`: which rank, on which machine, how much slower, over which steps.
std::string DescribeStraggler(const StragglerEvent& event, double factor);

class StragglerWatch {
 public:
  // `factor` > 1 and `steps` >= 1 (the flags' checks).
  StragglerWatch(int world_size, double factor, int steps);

  void Add(const RankStepTimes& times);
  // Compares the steps every rank's time has come for, in order; what changed.
  std::vector<StragglerEvent> Compare();

 private:
  struct RankState {
    int machine = 0;
    std::string host;
    bool named = false;
    int run = 0;  // steps in a row slow (not named) or within the factor (named)
    int64_t run_start = 0;
    std::vector<double> own, median;  // over the run
  };

  int world_size_;
  double factor_;
  int steps_;
  int64_t compared_ = -1;                           // the last step compared
  std::map<int64_t, std::vector<double>> pending_;  // step -> every rank's time, < 0 not yet
  std::vector<RankState> ranks_;
};

// A run's part of Note [Stragglers] on one rank: its compute time of each optimizer step to the
// sharing, and on rank 0 the comparison of every rank's that came.
class StragglerCheck {
 public:
  // `sharing` NULL: the ranks' times are not compared (one rank, --straggler-factor 0).
  StragglerCheck(StepTimeSharing* sharing, int rank, int world_size,
                 const StragglerOptions& options);

  // After the optimizer step that made `global_step` steps, given this rank's compute time of
  // the run so far: what changed (rank 0; nothing elsewhere).
  std::vector<StragglerEvent> AfterStep(int64_t global_step, double compute_seconds);

 private:
  StepTimeSharing* sharing_;
  std::unique_ptr<StragglerWatch> watch_;  // rank 0's, when compared
  double compute_seconds_ = 0.0;           // up to the step before
};

}  // namespace dpl::training
