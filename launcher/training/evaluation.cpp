#include "training/evaluation.hpp"

#include <algorithm>

#include "observability/tracer.hpp"

namespace dpl::training {

Result<EvaluationTotals> EvaluateSplit(Model& model, DataSplit& split, int64_t count,
                                       BatchBuffer& buffer, int64_t chunk, Collectives& collectives,
                                       const std::string& name) {
  const bool validation = name.rfind("validation", 0) == 0;
  const observability::TraceScope span("eval", validation ? "validation" : "evaluation");
  DPL_RETURN_IF_ERROR(model.SetMode(DPL_MODEL_MODE_EVAL));
  const int64_t begin = count * collectives.rank() / collectives.size();
  const int64_t end = count * (collectives.rank() + 1) / collectives.size();
  std::vector<int64_t> indices(static_cast<size_t>(std::max<int64_t>(chunk, 1)));
  EvaluationTotals totals;
  for (int64_t first = begin; first < end; first += chunk) {
    const int64_t n = std::min(chunk, end - first);
    for (int64_t i = 0; i < n; ++i) indices[size_t(i)] = first + i;
    DPL_RETURN_IF_ERROR(
        split.Fill(indices.data(), 0, buffer.Input(n), buffer.Target(n))
            .WithContext(validation ? "reading the validation data" : "reading the test data"));
    dpl_eval_result result{};
    DPL_RETURN_IF_ERROR(model.EvalStep(buffer.Input(n), buffer.Target(n), &result));
    totals.loss_sum += result.loss_sum;
    totals.elements += double(result.elements);
    totals.correct += double(result.correct);
  }
  totals.samples = double(end - begin);
  std::vector<double> sums = {totals.loss_sum, totals.elements, totals.correct, totals.samples};
  DPL_RETURN_IF_ERROR(collectives.SumScalars(name, &sums));
  return EvaluationTotals{sums[0], sums[1], sums[2], sums[3]};
}

bool RecordValidationLoss(double loss, ValidationState* state) {
  ++state->evaluations;
  if (loss < state->best_loss) {
    state->best_loss = loss;
    state->without_improvement = 0;
    return true;
  }
  ++state->without_improvement;
  return false;
}

bool PatienceRunOut(const ValidationState& state, int64_t patience) {
  return patience > 0 && state.without_improvement >= patience;
}

}  // namespace dpl::training
