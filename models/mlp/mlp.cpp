// A small multilayer perceptron as a dpl model plugin. It shows that the host knows nothing
// model-specific: a different network, shape handling and option set behind the same ABI.
#include "dpl/torch_model.hpp"

namespace {

// flatten (784) -> fc1 Linear(784, hidden) -> ReLU -> fc2 Linear(hidden, 10) -> log_softmax.
// Option hidden=N sets the hidden width (default 128).
struct Mlp : torch::nn::Module {
  explicit Mlp(const dpl::torch_model::ModelOptions& options) {
    const int64_t hidden = options.GetInt("hidden", 128);
    if (hidden < 1) {
      throw dpl::torch_model::InvalidOption("option \"hidden\" must be >= 1, got " +
                                            std::to_string(hidden));
    }
    fc1 = register_module("fc1", torch::nn::Linear(784, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 10));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(torch::flatten(x, 1)));
    return torch::log_softmax(fc2->forward(x), 1);
  }

  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
};

}  // namespace

DPL_EXPORT_TORCH_MODEL(Mlp, "mlp", "1.0.0", "a 784-128-10 multilayer perceptron for 28x28 images",
                       (std::vector<int64_t>{1, 28, 28}), 10)
