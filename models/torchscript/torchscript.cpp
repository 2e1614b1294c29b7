// The TorchScript model plugin: trains any module saved from Python with torch.jit.save
// (torch.jit.script or torch.jit.trace), through the SDK helper's model instance.
//     launcher --model torchscript --model-options file=net.pt[,loss=nll|cross_entropy|mse]
#include <torch/library.h>

#include <cmath>

#include "dpl/torch_model.hpp"
#include "dpl/torch_model/batched_matmul.hpp"
#include "script_network.hpp"

namespace dpl::torchscript {
namespace {

// Note [TorchScript's batched products] (matmul_rewrite.hpp): the operator the rewritten graphs
// call; a composite of autograd-aware calls, so autograd needs no kernel of its own.
torch::Tensor BatchedMatmulOperator(const torch::Tensor& a, const torch::Tensor& b) {
  return torch_model::BatchedMatmul(a, b);
}

// A mask for products of a.dim() dimensions as one (rows, columns) matrix, where every size
// before those is 1 (nanoGPT's causal buffer, sliced to (1, 1, T, T)), so that it broadcasts over
// the product's leading sizes alone; undefined otherwise.
torch::Tensor OneMatrixMask(const torch::Tensor& mask, const torch::Tensor& a,
                            const torch::Tensor& b) {
  if (mask.dim() < 2 || mask.dim() > a.dim() || mask.size(-2) != a.size(-2) ||
      mask.size(-1) != b.size(-1)) {
    return {};
  }
  for (int64_t d = 0; d + 2 < mask.dim(); ++d) {
    if (mask.size(d) != 1) return {};
  }
  return mask.reshape({mask.size(-2), mask.size(-1)});
}

// Note [TorchScript's masked scores] (matmul_rewrite.hpp): (a @ b) * scale, masked_fill(mask,
// value). A mask of (rows, columns) booleans, alone or behind sizes of 1, filled with -inf is an
// additive mask of 0 and -inf added in the product's pass, with the same values where the
// product is finite; anything else is the three operations.
torch::Tensor ScaledMaskedMatmulOperator(const torch::Tensor& a, const torch::Tensor& b,
                                         const c10::Scalar& scale, const torch::Tensor& mask,
                                         const c10::Scalar& value) {
  const bool minus_infinity =
      value.isFloatingPoint() && std::isinf(value.toDouble()) && value.toDouble() < 0;
  const torch::Tensor matrix = a.dim() >= 3 ? OneMatrixMask(mask, a, b) : torch::Tensor();
  if (minus_infinity && mask.scalar_type() == torch::kBool && matrix.defined()) {
    const torch::Tensor additive = torch::zeros(matrix.sizes(), mask.options().dtype(torch::kFloat))
                                       .masked_fill(matrix, value);
    return torch_model::ScaledBatchedMatmul(a, b, scale.toDouble(), additive);
  }
  return torch_model::BatchedMatmul(a, b).mul(scale).masked_fill(mask, value);
}

TORCH_LIBRARY(dpl_torchscript, library) {
  library.def("batched_matmul(Tensor a, Tensor b) -> Tensor", &BatchedMatmulOperator);
  library.def(
      "scaled_masked_matmul(Tensor a, Tensor b, Scalar scale, Tensor mask, Scalar value) -> Tensor",
      &ScaledMaskedMatmulOperator);
}

// On the CPU, where BatchedMatmul has its BLAS: the module's matmuls through it, said in the log.
bool UseBatchedMatmuls(const torch::jit::Module& module, const torch_model::BuildContext& context,
                       const std::string& file) {
  if (!context.device.is_cpu() || !torch_model::HasDirectSgemm()) return false;
  RewriteMatmuls(module, /*to_batched=*/true);
  const size_t scores = CountCalls(module, kScaledMaskedMatmulOperator);
  const size_t count = CountCalls(module, kBatchedMatmulOperator) + scores;
  if (count == 0) return false;
  context.Log(DPL_LOG_INFO,
              "TorchScript file " + file + ": " + std::to_string(count) +
                  " matrix product(s) (aten::matmul) run matrix by matrix through the BLAS "
                  "libtorch loaded, its batches over the worker's threads" +
                  (scores == 0 ? std::string()
                               : "; " + std::to_string(scores) +
                                     " of them scaled and masked in the same pass"));
  return true;
}

struct TorchScriptTraits {
  using Options = torch_model::ModelOptions;
  static constexpr const char* kName = "torchscript";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "any module saved from Python with torch.jit.save (--model-options "
      "file=net.pt[,loss=nll|cross_entropy|mse])";

  // The data's samples, shape and classes, whatever they are: the module is checked against
  // them.
  static torch_model::DataSpec Accepts() {
    return {torch_model::AnyInputShape({}), torch_model::AnyNumClasses(0),
            torch_model::Samples::kAny};
  }

  static torch_model::NetworkSpec Build(Options& options,
                                        const torch_model::BuildContext& context) {
    const std::string file = options.GetString("file", "");
    const std::string loss_name = options.GetChoice("loss", "nll", {"nll", "cross_entropy", "mse"});
    if (file.empty()) {
      throw InvalidArgument(
          "option \"file\" is missing: --model-options file=PATH names the TorchScript module to "
          "train (torch.jit.save(torch.jit.script(module), PATH), or tools/export_model.py)");
    }
    if (context.data.input_shape.empty()) {
      throw InvalidArgument(
          "the host does not say the data's sample shape (config input_ndim 0); a TorchScript "
          "model takes its input shape from the data");
    }
    const Loss loss = loss_name == "nll"             ? Loss::kNll
                      : loss_name == "cross_entropy" ? Loss::kCrossEntropy
                                                     : Loss::kMse;
    torch::jit::Module module = LoadScriptModule(file, context.device);
#if DPL_LIBTORCH_AT_LEAST(2, 11)
    // Once a job, at create: torch.jit.script and torch.jit.save warn in Python, but libtorch
    // says nothing while it trains.
    context.Log(DPL_LOG_INFO, std::string("TorchScript is deprecated from torch 2.11 on, in favour "
                                          "of torch.export; libtorch ") +
                                  TORCH_VERSION + " still loads and trains " + file);
#endif
    CheckParameters(module, file);
    const bool batched = UseBatchedMatmuls(module, context, file);
    auto network = std::make_unique<ScriptNetwork>(std::move(module), file, batched);
    torch_model::NetworkSpec spec;
    spec.num_classes = CheckForward(*network, context, loss, file);
    WarnAboutFixedModes(network->module(), context, file);
    spec.network = std::move(network);
    spec.input_shape = context.data.input_shape;
    spec.loss = loss;
    return spec;
  }
};

}  // namespace
}  // namespace dpl::torchscript

extern "C" {
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v4 dpl_torchscript_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
const dpl_model_plugin_v4 dpl_torchscript_model_table =
    ::dpl::torch_model::Plugin<::dpl::torchscript::TorchScriptTraits>::TableV4();
}
