// The recipe's ConvNet (docs/recipe.md) as a dpl model plugin.
#include "dpl/torch_model.hpp"
#include "fused_ops.hpp"

namespace {

// cn1 -> ReLU -> cn2 -> ReLU -> max_pool2d(2) -> Dropout2d(0.10) -> flatten -> fc1 -> ReLU
// -> Dropout2d(0.25) -> fc2 -> log_softmax, with PyTorch's default initialisation.
// Option dropout=0 turns both dropouts off (for runs that must be reproducible bit for bit).
struct ConvNet : torch::nn::Module {
  explicit ConvNet(const dpl::torch_model::ModelOptions& options)
      : dropout_enabled(options.GetBool("dropout", true)) {
    cn1 = register_module("cn1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).stride(1)));
    cn2 = register_module("cn2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).stride(1)));
    fc1 = register_module("fc1", torch::nn::Linear(4608, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }

  torch::Tensor forward(torch::Tensor x) {
    // relu and max_pool2d(relu) through dpl::convnet's kernels on the CPU (Note [Why own kernels
    // for ReLU and max-pool]): the same values, in a fraction of libtorch 1.13's time.
    x = dpl::convnet::Relu(Convolve(cn1, x));
    x = dpl::convnet::ReluMaxPool2x2(Convolve(cn2, x));
    // feature_dropout draws one mask value per (sample, channel) whatever the layout, and flatten
    // of an NHWC tensor gives fc1 the (C, H, W) order all the same.
    // feature_dropout is what Python's Dropout2d runs for 4-D and for 2-D input alike. (libtorch's
    // C++ Dropout2d would treat the 2-D (batch, 64) input as unbatched and drop whole samples.)
    x = torch::feature_dropout(x, 0.10, is_training() && dropout_enabled);
    x = torch::flatten(x, 1);
    x = dpl::convnet::Relu(fc1->forward(x));
    x = torch::feature_dropout(x, 0.25, is_training() && dropout_enabled);
    x = fc2->forward(x);
    // float32 log-probabilities under a bf16 autocast too (libtorch 1.13's CPU autocast would
    // leave log_softmax in bfloat16); a no-op in float32.
    return torch::log_softmax(x, 1, torch::kFloat32);
  }

  // conv->forward(input) (stride 1, no padding, as cn1 and cn2 are built), on the CPU with the
  // input and a copy of the weight in NHWC, so that oneDNN runs its nhwc convolutions instead of
  // reordering NCHW tensors to its blocked layout and back on every call (Note [Why own kernels
  // for ReLU and max-pool]). The parameters stay NCHW (OIHW) for the host.
  static torch::Tensor Convolve(torch::nn::Conv2d& conv, const torch::Tensor& input) {
    if (!dpl::convnet::OwnKernelsApply(input) || input.dim() != 4) return conv->forward(input);
    return torch::conv2d(dpl::convnet::ChannelsLastCopy(input),
                         dpl::convnet::ChannelsLastCopy(conv->weight), conv->bias);
  }

  bool dropout_enabled;
  torch::nn::Conv2d cn1{nullptr};
  torch::nn::Conv2d cn2{nullptr};
  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
};

}  // namespace

DPL_EXPORT_TORCH_MODEL(ConvNet, "convnet", "1.0.0",
                       "the recipe's MNIST ConvNet (2 conv, 2 linear, about 300k parameters)",
                       (std::vector<int64_t>{1, 28, 28}), 10)
