// What a run tells its user, all from rank 0: the loss every --log-interval batches, the end of
// each epoch and of training, the time per step by phase, the test-set result; the JSON-lines
// metrics file (--metrics), the TensorBoard events (--tensorboard) and the records of the
// launcher's progress bar. Every rank also marks the step under way for its trace and stall
// reports. The training loop reports events; this decides what is written where.
//
// The metrics file holds one JSON object a line, told apart by "kind":
//   {"kind": "step", "epoch", "step", "batch", "loss", "lr", "samples_per_s", "time_s",
//    "phase_ms": {"data", "forward_backward", "communication_wait", "optimizer", "host_copies"}}
//     at each logged batch; samples_per_s and phase_ms (per optimizer step) cover the batches
//     since the previous line; time_s counts from the start of training;
//   {"kind": "epoch", "epoch", "step", "loss", "loss_batches", "seconds", "samples",
//    "samples_per_s", "time_s"}
//     at the end of each epoch; loss is the mean training loss of the epoch's batches this run
//     trained, every rank's (Note [Epoch loss]), over loss_batches batch losses (batches x ranks);
//   {"kind": "eval", "epoch", "step", "loss", "accuracy", "correct", "count", "time_s"}
//     after the test-set evaluation (accuracy as a fraction, loss the average per target element:
//     per sample for class labels, count the elements); for a target per position (tokens) also
//     "perplexity" (exp of the loss) and "tokens" (= count);
//   {"kind": "validation", the keys of "eval", "best_loss"} after each evaluation of the
//     validation split (--eval-every), best_loss the lowest loss so far;
//   {"kind": "straggler", "step", "rank", "machine", "host", "straggling", "compute_ms",
//    "median_ms", "slowdown", "first_step", "last_step", "time_s"}
//     when a rank is named a straggler (straggling true) or no longer one (Note [Stragglers] in
//     stragglers.hpp); step is the step rank 0 is at, first_step..last_step the steps compared.
// TensorBoard gets the same numbers as scalars against the step: train/loss, train/lr,
// train/samples_per_s, train/phase_ms/<phase>, train/epoch_loss, train/epoch_samples_per_s,
// eval/loss, eval/accuracy (eval/perplexity), validation/loss, validation/accuracy
// (validation/perplexity), stragglers/rank_<r> (the rank's slowdown against the median rank when
// named a straggler or no longer one); train/epoch_loss is the epoch's mean loss.
//
// Note [Epoch loss]
// An epoch's loss is the mean of every batch loss of the epoch, every rank's: the mean over ranks
// of each rank's mean, as the gradients are averaged, which for equal local batches is the loss of
// the global batch, averaged over the epoch (as Lightning's and Keras's epoch figures). Each rank
// sums its own batch losses; at the end of the epoch the sums and counts go to every rank once
// (the front's SumScalars, a few numbers through the store) instead of a number per step.
// The step lines stay rank 0's own batch loss.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "observability/tensorboard_writer.hpp"
#include "training/config.hpp"
#include "training/step_plan.hpp"
#include "training/step_profile.hpp"
#include "training/stragglers.hpp"

namespace dpl::training {

struct BatchReport {
  int64_t epoch = 0;
  int64_t batch = 0;    // batches of the epoch done, this one included
  int64_t batches = 0;  // batches per epoch
  int64_t global_step = 0;
  float loss = 0.0f;
  int64_t epoch_samples = 0;   // global samples of this epoch so far, this run
  double learning_rate = 0.0;  // of the optimizer step this batch belongs to
};

// One evaluation's sums over every rank (evaluation.hpp), for the log and the metrics.
struct EvaluationReport {
  bool validation = false;    // the validation split while training, else the test set
  bool per_position = false;  // a target per position (tokens): per-token loss and perplexity
  double loss_sum = 0.0;
  double elements = 0.0;  // target elements: samples, or tokens
  double correct = 0.0;
  double best_loss = 0.0;  // validation: the lowest mean loss so far
  int64_t step = -1;       // the optimizer steps done; -1: the last batch's
};

class Reporter {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the metrics file (appended to when resuming) and the TensorBoard folder on rank 0.
  static Result<std::unique_ptr<Reporter>> Create(const TrainingConfig& config, int rank);

  // Once the start is known (after --resume): the totals of log lines and progress bar.
  void OnRunStart(const StepPlan& plan);
  void StartEpoch();
  // Before each batch: the optimizer step it works towards (for the trace and stall reports).
  void StartBatch(int64_t global_step);
  // Every rank, after each batch (every rank sums its batch losses: Note [Epoch loss]).
  void OnBatch(const BatchReport& report, const StepProfile& profile);
  // This rank's {sum of its batch losses, batches} of the epoch under way; the trainer sums them
  // over the ranks for OnEpochEnd.
  std::vector<double> EpochLossTotals() const;
  // `loss_totals`: EpochLossTotals summed over every rank.
  void OnEpochEnd(int64_t epoch, int64_t samples, const std::vector<double>& loss_totals);
  void OnTrainingEnd(int64_t steps, int64_t samples, float loss, const StepProfile& profile);
  void OnEvaluation(const EvaluationReport& report);
  // At the run's very end (rank 0): where the metrics and TensorBoard's events are, beside the
  // exported model the trainer names, for the files whose writing did not fail on the way.
  void SayWhereRecordsAre() const;
  // Rank 0, at step `step`: a rank named a straggler or no longer one.
  void OnStraggler(int64_t step, const StragglerEvent& event);

 private:
  struct Snapshot {
    Clock::time_point time;
    int64_t samples = 0;
    int64_t steps = 0;
    double phase_seconds[kStepPhaseCount] = {};
  };

  Reporter(const TrainingConfig& config, int rank);
  void LogBatch(const BatchReport& report, const StepProfile& profile);
  void SendProgress(int64_t step, float loss, bool done);
  void WriteMetrics(const std::string& json_line);
  void AddScalar(const std::string& tag, int64_t step, double value);
  void FlushScalars();
  double SecondsSinceStart() const;
  bool rank0() const { return rank_ == 0; }

  // The epoch under way.
  struct EpochTally {
    int64_t number = -1;
    int64_t batches = 0;  // batches of it this run trains
    int64_t samples_seen = 0;
    double loss_sum = 0.0;  // this rank's batch losses of it
    int64_t loss_batches = 0;
    Clock::time_point start = Clock::now();
  };
  // The run so far.
  struct RunTally {
    int64_t steps = 0;    // optimizer steps done in all
    int64_t samples = 0;  // global samples of this run
    Clock::time_point start = Clock::now();
    Clock::time_point last_progress{};
    Snapshot last_logged;
    bool said_not_finite = false;  // a NaN or infinite loss is said once a run
    double step_loss_sum = 0.0;    // this rank's losses of the micro-batches of the step under way
    int64_t step_loss_batches = 0;
  };

  const TrainingConfig& config_;
  int rank_;
  StepPlan plan_;
  EpochTally epoch_;
  RunTally run_;
  // Where rank 0 writes (--metrics, --tensorboard): NULL where it was not asked to.
  std::unique_ptr<std::ofstream> metrics_;
  std::unique_ptr<observability::TensorBoardWriter> tensorboard_;
};

}  // namespace dpl::training
