// logreg: multinomial logistic regression on 28x28 images, the smallest useful dpl model plugin.
// Copy this file, replace the module, keep the one DPL_EXPORT_TORCH_MODEL line.
#include "dpl/torch_model.hpp"

namespace {

// A normal torch::nn::Module. forward takes (batch, 1, 28, 28) float32 and returns
// LOG-PROBABILITIES (batch, 10); the SDK helper does the loss, backward and the whole C ABI.
struct LogisticRegression : torch::nn::Module {
  // Model options arrive from `launcher --model-options key=value,...`; a key the constructor
  // does not ask for is refused with the list of known ones. Here: bias=0|1 (default 1).
  explicit LogisticRegression(const dpl::torch_model::ModelOptions& options) {
    linear = register_module(
        "linear", torch::nn::Linear(
                      torch::nn::LinearOptions(28 * 28, 10).bias(options.GetBool("bias", true))));
  }

  torch::Tensor forward(torch::Tensor images) {
    // Log-probabilities in float32 even when the forward pass runs in bfloat16 (--precision bf16).
    return torch::log_softmax(linear->forward(torch::flatten(images, 1)), 1, torch::kFloat32);
  }

  torch::nn::Linear linear{nullptr};
};

}  // namespace

// name on the command line, version, one-line description, one sample's shape, classes (the data
// must match them; dpl::torch_model::AnyInputShape / AnyNumClasses accept any, see mlp.cpp).
DPL_EXPORT_TORCH_MODEL(LogisticRegression, "logreg", "1.0.0",
                       "logistic regression on 28x28 images (template model)",
                       (std::vector<int64_t>{1, 28, 28}), 10)
