// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the loss train_step
// backpropagates and eval_step sums, over every target element.
//
// Note [The loss over every target element]: forward returns class scores for every target
// element, (batch, target shape..., classes): (batch, classes) for one label per sample,
// (batch, T, classes) for a label per position. The loss compares the (elements, classes) scores
// with the (elements) labels, so the mean is over every target element and eval's sum over them
// too; for one label per sample that is the loss of model ABI v1 to v3, bit for bit. The loss is
// float32, whatever the forward's precision (Note [Mixed precision]).
#ifndef DPL_TORCH_MODEL_LOSS_HPP
#define DPL_TORCH_MODEL_LOSS_HPP

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/network.hpp"

namespace dpl {
namespace torch_model {
namespace {

// What eval_step measures on a batch (model ABI v4's dpl_eval_result_v4).
struct Evaluation {
  double loss_sum = 0.0;  // over every target element
  int64_t elements = 0;   // target elements
  int64_t correct = 0;    // elements whose arg-max class is the target
};

// The loss of (elements, classes) float32 scores against (elements) labels.
inline torch::Tensor FlatLoss(Loss loss, const torch::Tensor& scores, const torch::Tensor& labels,
                              at::Reduction::Reduction reduction) {
  const int64_t classes = scores.size(1);
  const int64_t elements = labels.size(0);
  switch (loss) {
    case Loss::kNll:
      return torch::nll_loss(scores, labels, {}, reduction);
    case Loss::kCrossEntropy:
      return torch::nll_loss(torch::log_softmax(scores, 1), labels, {}, reduction);
    case Loss::kMse: {
      const auto range = torch::aminmax(labels);
      const int64_t lowest = std::get<0>(range).item<int64_t>();
      const int64_t highest = std::get<1>(range).item<int64_t>();
      if (lowest < 0 || highest >= classes) {
        throw InvalidArgument("label " + std::to_string(lowest < 0 ? lowest : highest) +
                              " is outside [0, " + std::to_string(classes) + ")");
      }
      const torch::Tensor targets = torch::one_hot(labels, classes).to(torch::kFloat32);
      torch::Tensor squared = torch::mse_loss(scores, targets, at::Reduction::Sum);
      // Per element, the mean over the classes: train's mean is then eval's sum / elements.
      return reduction == at::Reduction::Sum ? squared / double(classes)
                                             : squared / double(classes * elements);
    }
  }
  throw PluginError(DPL_ERR_INTERNAL, "unknown loss");
}

// The loss of forward's `output` against `labels` (Note [The loss over every target element]).
inline torch::Tensor ElementLoss(Loss loss, const torch::Tensor& output,
                                 const torch::Tensor& labels, int64_t classes,
                                 at::Reduction::Reduction reduction) {
  std::vector<int64_t> wanted = labels.sizes().vec();
  wanted.push_back(classes);
  if (output.sizes() != c10::IntArrayRef(wanted)) {
    throw InvalidArgument("forward returned a tensor of shape " + ShapeText(output.sizes()) +
                          " for a batch of " + std::to_string(labels.size(0)) + "; the " +
                          LossName(loss) + " loss needs " + ShapeText(wanted));
  }
  return FlatLoss(loss, output.reshape({-1, classes}).to(torch::kFloat32), labels.reshape({-1}),
                  reduction);
}

// eval_step's measures of forward's `output` against `labels`.
inline Evaluation Evaluate(Loss loss, const torch::Tensor& output, const torch::Tensor& labels,
                           int64_t classes) {
  Evaluation evaluation;
  evaluation.loss_sum =
      ElementLoss(loss, output, labels, classes, at::Reduction::Sum).item<double>();
  evaluation.elements = labels.numel();
  evaluation.correct = output.argmax(-1).eq(labels).sum().item<int64_t>();
  return evaluation;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_LOSS_HPP
