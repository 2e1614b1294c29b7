// A test-only model plugin with buffers: BatchNorm's running statistics and counter, and a frozen
// parameter. Built as model ABI v4 and, with DPL_TORCH_MODEL_ABI_VERSION 2, as v2.
#include "dpl/torch_model.hpp"

namespace {

// conv(1 -> 4, 3x3) -> BatchNorm -> ReLU -> mean over the image -> scale (frozen) -> fc(4 -> 10).
struct BatchNormNet : torch::nn::Module {
  BatchNormNet()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(4))),
        fc(register_module("fc", torch::nn::Linear(4, 10))) {
    scale = register_parameter("scale", torch::full({1}, 2.0f), /*requires_grad=*/false);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn->forward(conv->forward(x))).mean({2, 3});
    return torch::log_softmax(fc->forward(x * scale), 1, torch::kFloat32);
  }

  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
  torch::Tensor scale;
};

}  // namespace

DPL_EXPORT_TORCH_MODEL(BatchNormNet, "batchnorm", "1.0.0",
                       "a conv + BatchNorm network with buffers (tests only)",
                       (std::vector<int64_t>{1, 28, 28}), 10)
