// What a run tells its user, all from rank 0: the loss every --log-interval batches, the end of
// each epoch and of training, the time per step by phase, the test-set result, the JSON-lines
// metrics file (--metrics) and the progress bar. The training loop reports events; this decides
// what is written where.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/step_profile.hpp"

namespace dpl::training {

struct BatchReport {
  int64_t epoch = 0;
  int64_t batch = 0;    // batches of the epoch done, this one included
  int64_t batches = 0;  // batches per epoch
  int64_t global_step = 0;
  float loss = 0.0f;
  int64_t epoch_samples = 0;  // global samples of this epoch so far, this run
};

class Reporter {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the metrics file on rank 0 (appended to when resuming).
  static Result<std::unique_ptr<Reporter>> Create(const TrainingConfig& config, int rank);

  void StartEpoch();
  void OnBatch(const BatchReport& report);
  void OnEpochEnd(int64_t epoch, int64_t samples, float loss);
  void OnTrainingEnd(int64_t steps, int64_t samples, float loss, const StepProfile& profile);
  void OnEvaluation(double loss_sum, double correct, double count);

 private:
  Reporter(const TrainingConfig& config, int rank);
  void Progress(const BatchReport& report, double samples_per_s);
  bool rank0() const { return rank_ == 0; }

  const TrainingConfig& config_;
  int rank_;
  bool show_progress_ = false;
  std::unique_ptr<std::ofstream> metrics_;
  Clock::time_point job_start_ = Clock::now();
  Clock::time_point epoch_start_ = Clock::now();
};

}  // namespace dpl::training
