// A small multilayer perceptron as a dpl model plugin. It shows that the host knows nothing
// model-specific: a different network, shape handling and option set behind the same ABI.
#include "dpl/torch_model.hpp"

namespace {

// flatten -> fc1 Linear(sample elements, hidden) -> ReLU -> fc2 Linear(hidden, classes) ->
// log_softmax, for samples of any shape and any number of classes (the data's: 784 and 10 for
// 28x28 images of 10 classes). Option hidden=N sets the hidden width (default 128).
struct Mlp : torch::nn::Module {
  explicit Mlp(const dpl::torch_model::ModelOptions& options) {
    const int64_t hidden = options.GetInt("hidden", 128);
    if (hidden < 1) {
      throw dpl::torch_model::InvalidOption("option \"hidden\" must be >= 1, got " +
                                            std::to_string(hidden));
    }
    int64_t sample_elements = 1;
    for (int64_t extent : options.input_shape()) sample_elements *= extent;
    fc1 = register_module("fc1", torch::nn::Linear(sample_elements, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, options.num_classes()));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(torch::flatten(x, 1)));
    return torch::log_softmax(fc2->forward(x), 1, torch::kFloat32);
  }

  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
};

}  // namespace

DPL_EXPORT_TORCH_MODEL(Mlp, "mlp", "1.0.0",
                       "a one-hidden-layer perceptron for samples of any shape (default 1x28x28, "
                       "10 classes)",
                       dpl::torch_model::AnyInputShape({1, 28, 28}),
                       dpl::torch_model::AnyNumClasses(10))
