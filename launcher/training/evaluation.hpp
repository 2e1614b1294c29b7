// Evaluating the model on a split of the data, every rank on its own share, the sums added
// across ranks: the test set at the end of a run, and the validation split every --eval-every
// optimizer steps, which keeps the best loss for --early-stop-patience and --export-best.
//
// Note [Evaluation totals]: eval_step reports the loss summed over a batch's target elements,
// their number and those predicted right (model ABI v4; one element per sample for a class
// label, per position for tokens). Each rank adds its batches' numbers, then four sums (loss,
// elements, correct, samples) go across ranks through the front's SumScalars (the store's), so
// every rank holds the same totals whatever its backend moves: the mean loss per element, its exp
// (perplexity, for tokens) and the accuracy per element.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/batch_buffer.hpp"
#include "training/collectives/collectives.hpp"
#include "training/data.hpp"
#include "training/model.hpp"

namespace dpl::training {

// The sums of one evaluation over every rank (Note [Evaluation totals]).
struct EvaluationTotals {
  double loss_sum = 0.0;
  double elements = 0.0;
  double correct = 0.0;
  double samples = 0.0;

  double MeanLoss() const { return elements > 0 ? loss_sum / elements : 0.0; }
  double Accuracy() const { return elements > 0 ? correct / elements : 0.0; }
};

// Evaluates samples [0, count) of `split` (epoch 0) in eval mode: each rank its contiguous share,
// in batches of at most `chunk` through `buffer` (which must hold `chunk` samples of the model's
// input and target), the totals added across the ranks of `collectives` under `name` (unique per
// evaluation: the store keeps each; "validation..." for the validation split). Leaves the model in
// eval mode.
Result<EvaluationTotals> EvaluateSplit(Model& model, DataSplit& split, int64_t count,
                                       BatchBuffer& buffer, int64_t chunk, Collectives& collectives,
                                       const std::string& name);

// What validation while training remembers, and checkpoints carry so a resumed run stops where
// the straight one does: the best mean loss so far and the evaluations since it improved.
struct ValidationState {
  double best_loss = std::numeric_limits<double>::infinity();
  int64_t evaluations = 0;
  int64_t without_improvement = 0;
};

// Counts one validation loss into `state`; true when it is a new best (strictly lower).
bool RecordValidationLoss(double loss, ValidationState* state);

// Whether --early-stop-patience `patience` (0: never) ends the run in `state`.
bool PatienceRunOut(const ValidationState& state, int64_t patience);

}  // namespace dpl::training
