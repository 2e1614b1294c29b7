// The TorchScript model plugin: trains any module saved from Python with torch.jit.save
// (torch.jit.script or torch.jit.trace), through the SDK helper's model instance.
//     launcher --model torchscript --model-options file=net.pt[,loss=nll|cross_entropy|mse]
#include <torch/library.h>

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

TORCH_LIBRARY(dpl_torchscript, library) {
  library.def("batched_matmul(Tensor a, Tensor b) -> Tensor", &BatchedMatmulOperator);
}

// On the CPU, where BatchedMatmul has its BLAS: the module's matmuls through it, said in the log.
bool UseBatchedMatmuls(const torch::jit::Module& module, const torch_model::BuildContext& context,
                       const std::string& file) {
  if (!context.device.is_cpu() || !torch_model::HasDirectSgemm()) return false;
  RewriteMatmuls(module, /*to_batched=*/true);
  const size_t count = CountBatchedMatmuls(module);
  if (count == 0) return false;
  context.Log(DPL_LOG_INFO, "TorchScript file " + file + ": " + std::to_string(count) +
                                " matrix product(s) (aten::matmul) run matrix by matrix through "
                                "the BLAS libtorch loaded, its batches over the worker's threads");
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
