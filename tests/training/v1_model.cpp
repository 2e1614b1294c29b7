// A model plugin that exports model ABI v1 (built with dpl_torch_model_plugin(... ABI_VERSION 1)),
// so the end-to-end tests check that the launcher still trains a plugin of the older ABI.
#include "dpl/torch_model.hpp"

struct LogisticRegressionV1 : torch::nn::Module {
  LogisticRegressionV1() : linear(register_module("linear", torch::nn::Linear(784, 10))) {}
  torch::Tensor forward(torch::Tensor input) {
    return torch::log_softmax(linear->forward(input.flatten(1)), 1);
  }
  torch::nn::Linear linear;
};

DPL_EXPORT_TORCH_MODEL(LogisticRegressionV1, "logreg_v1", "1.0.0",
                       "logistic regression exported as model ABI v1 (tests only)",
                       (std::vector<int64_t>{1, 28, 28}), 10)
