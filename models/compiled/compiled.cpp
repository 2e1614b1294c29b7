// The compiled model plugin: trains a PyTorch module's training step compiled ahead of time by
// tools/compile_model.py (torch.export and AOTInductor), through the SDK helper's model instance.
//     launcher --model compiled --model-options file=model.pt2 ...
#include "compiled_network.hpp"
#include "dpl/torch_model.hpp"
#include "package.hpp"

namespace dpl::compiled {
namespace {

torch_model::Loss LossNamed(const std::string& name, const std::string& file) {
  if (name == "nll") return torch_model::Loss::kNll;
  if (name == "cross_entropy") return torch_model::Loss::kCrossEntropy;
  if (name == "mse") return torch_model::Loss::kMse;
  throw InvalidArgument("package " + file + " names the loss \"" + name +
                        "\", which this plugin does not know");
}

struct CompiledTraits {
  using Options = torch_model::ModelOptions;
  static constexpr const char* kName = "compiled";
  static constexpr const char* kVersion = "1.0.0";
  static constexpr const char* kDescription =
      "a PyTorch module's training step compiled by tools/compile_model.py (--model-options "
      "file=model.pt2)";

  // Whatever the data is: the package says what it takes, and Build compares.
  static torch_model::DataSpec Accepts() {
    return {torch_model::AnyInputShape({}), torch_model::AnyNumClasses(0),
            torch_model::Samples::kAny};
  }

  static torch_model::NetworkSpec Build(Options& options,
                                        const torch_model::BuildContext& context) {
    const std::string file = options.GetString("file", "");
    if (file.empty()) {
      throw InvalidArgument(
          "option \"file\" is missing: --model-options file=PATH names the package to train "
          "(tools/compile_model.py PATH --module FILE.py:CLASS ...)");
    }
    if (context.data.input_shape.empty()) {
      throw InvalidArgument(
          "the host does not say the data's sample shape (config input_ndim 0); the compiled "
          "model checks its package against the data");
    }
    const std::unique_ptr<torch_files::ZipReader> zip = OpenPackage(file);
    PackageDescription description = ReadDescription(*zip);
    CheckTorch(description);
    CheckDevice(description, context.device);
    if (context.device.is_cpu()) CheckCpuInstructions(description);
    CheckPrecision(description, context.precision);
    CheckData(description, context.data);
    std::vector<torch::Tensor> values = ReadInitialValues(*zip, description, context.device);
    torch_model::NetworkSpec spec;
    spec.loss = LossNamed(description.Fact("loss"), file);
    spec.num_classes = std::stoll(description.Fact("classes"));
    spec.input_shape = context.data.input_shape;
    spec.network = std::make_unique<CompiledNetwork>(std::move(description), std::move(values),
                                                     context.device);
    return spec;
  }
};

}  // namespace
}  // namespace dpl::compiled

extern "C" {
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v4 dpl_compiled_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
const dpl_model_plugin_v4 dpl_compiled_model_table =
    ::dpl::torch_model::Plugin<::dpl::compiled::CompiledTraits>::TableV4();
}
