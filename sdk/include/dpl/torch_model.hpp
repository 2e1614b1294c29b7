// dpl SDK: header-only C++ helper that turns a libtorch module into a dpl model plugin.
//
// A model author writes an ordinary `torch::nn::Module` whose
//     torch::Tensor forward(torch::Tensor input)
// takes a float32 batch (batch, input_shape...) and returns LOG-PROBABILITIES (batch, classes),
// and exports it with one macro in the plugin's only .cpp file:
//
//     struct ConvNet : torch::nn::Module {
//       explicit ConvNet(const dpl::torch_model::ModelOptions& options);  // or ConvNet()
//       torch::Tensor forward(torch::Tensor input);
//     };
//     DPL_EXPORT_TORCH_MODEL(ConvNet, "convnet", "1.0.0", "one-line description",
//                            (std::vector<int64_t>{1, 28, 28}), 10)
//
// The macro defines the plugin's one exported symbol, `dpl_model_plugin_v4`, implementing every
// entry of dpl/model_v4.h, the optimizer on the model's device included (Note [Device optimizer]
// in dpl/torch_model/device_optimizer.hpp). Define DPL_TORCH_MODEL_ABI_VERSION 3 (or 2, 1) before
// including this header (dpl_torch_model_plugin(<target> ABI_VERSION 3) does it) to export
// `dpl_model_plugin_v3` (or _v2, _v1) instead, for launchers that know only those.
//
// The data. The last two arguments say what the module takes: exactly this sample shape and
// number of classes (the host's data must match, or create fails naming both), or, with
// dpl::torch_model::AnyInputShape({1, 28, 28}) / AnyNumClasses(10), whatever the data has (the
// argument is the default for hosts that do not say). The constructor reads the shape it is built
// for from ModelOptions::input_shape() and num_classes(): the MLP (models/mlp) flattens any
// sample shape that way. Such a module takes float32 samples with one class label each; a
// network of other samples (token ids with a label per position: models/gpt) writes its own
// Traits (dpl/torch_model/plugin.hpp) with DataSpec::samples.
//
// Options. --model-options "key=value,..." is ONE string shared by the module and this helper.
// The constructor reads its keys through ModelOptions (GetBool, GetInt, GetDouble, GetString,
// GetChoice); then the helper reads its own, which the module must not use:
//   broadcast_buffers=0|1|true|false (default 1): the host broadcasts the buffers from rank 0
//     before each training forward pass, as DDP does, and once after the last one (model ABI
//     v3's DPL_MODEL_BROADCAST_BUFFERS).
// A key nobody asked for is refused, listing the known ones (the module's, then the helper's).
// An option value the module cannot use: throw dpl::torch_model::InvalidOption.
//
// What the helper does with the module (details in the headers under dpl/torch_model/):
//  - Seeds libtorch with config.seed before constructing it (torch.manual_seed in Python), so
//    initialisation and dropout repeat; rng_state / set_rng_state save and restore the CPU
//    generator (and the CUDA device's), so dropout repeats after a restore.
//  - Parameters (contiguous float32, requires_grad) are the ABI's parameters, their gradients
//    views into one flat buffer (Note [Flat gradients]); buffers (named_buffers, e.g. BatchNorm's
//    running statistics) and frozen parameters are the ABI's buffers. Update buffers in place in
//    forward (BatchNorm does): the host holds their addresses.
//  - train_step: forward (under autocast for config.precision bf16 or fp16, Note [Mixed
//    precision]), nll_loss in float32 over every target element (Note [The loss over every target
//    element]), backward; eval_step the same in eval mode without gradients, reporting the loss
//    sum, the target elements and those predicted right. Under autocast, end forward with
//    torch::log_softmax(x, 1, torch::kFloat32) so the log-probabilities are float32
//    (libtorch 1.13's CPU autocast keeps log_softmax in bfloat16).
//  - save_state writes {name: tensor} for Python's torch.load (state_dict names: the module's own),
//    load_state reads such a file, Python's torch.save(model.state_dict(), path) or a TorchScript
//    archive (dpl/torch_model/state_file.hpp).
//  - CPU or CUDA (the config's device), batches through page-locked host buffers on CUDA, two host
//    batch slots, every device entry point with the model's device current on the calling thread.
//  - Process settings, once per worker: glibc keeps blocks under 32 MiB in its heap, and the
//    first such plugin to create a model installs libtorch's CPU allocator of Note [Large blocks
//    kept for reuse] (dpl/torch_model/large_blocks.hpp), which keeps larger blocks from one step
//    to the next, and pins that plugin in memory.
// Everything here has internal linkage (an anonymous namespace), so the plugin, built with hidden
// visibility, exports nothing else; the state files go through the SDK's torch_files library,
// which dpl_torch_model_plugin links statically, also built with hidden visibility.
//
// Helpers a module's own code may include (any translation unit of the plugin):
//  - dpl/torch_model/batched_matmul.hpp: BatchedMatmul, a batch of small products (attention's
//    heads) matrix by matrix over the worker's threads, and ScaledBatchedMatmul, scale * (a @ b)
//    + mask in the product's own pass (Note [Many small products]);
//  - dpl/torch_model/parallel.hpp: at::parallel_for, and a compile error where the file would
//    run its loops serially (Note [Loops of the thread team]).
//
// Only include this header from ONE translation unit per plugin (the one with the macro).
#ifndef DPL_TORCH_MODEL_HPP
#define DPL_TORCH_MODEL_HPP

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"
#include "dpl/torch_model/data.hpp"
#include "dpl/torch_model/network.hpp"
#include "dpl/torch_model/plugin.hpp"

#ifndef DPL_TORCH_MODEL_ABI_VERSION
#define DPL_TORCH_MODEL_ABI_VERSION 4
#endif
#if DPL_TORCH_MODEL_ABI_VERSION < 1 || DPL_TORCH_MODEL_ABI_VERSION > 4
#error "DPL_TORCH_MODEL_ABI_VERSION must be 1, 2, 3 or 4"
#endif

namespace dpl {
namespace torch_model {
namespace {

// What a model's constructor throws for an option value it cannot use; the host reports it as
// DPL_ERR_INVALID_ARGUMENT, prefixed with the model's name.
class InvalidOption : public PluginError {
 public:
  explicit InvalidOption(const std::string& message)
      : PluginError(DPL_ERR_INVALID_ARGUMENT, message) {}
};

// The model's view of create: the "key=value,..." model options (--model-options), the device,
// and the data it is built for. Each Get* marks its key as known, so after construction every
// key nobody asked for is reported as unknown (dpl/support/options.hpp).
class ModelOptions : public support::KeyValueOptions {
 public:
  ModelOptions(const char* text, const BuildContext& context)
      : KeyValueOptions(text, "--model-options"),
        device_(context.device),
        data_(context.data),
        precision_(context.precision) {}
  ModelOptions(const char* text, c10::Device device)
      : KeyValueOptions(text, "--model-options"), device_(device) {}

  // The device the model lives on (already checked to exist).
  c10::Device device() const { return device_; }
  // One sample's shape and the number of classes of the data: the host's when it says (model
  // ABI v3), else the defaults the model declared.
  const std::vector<int64_t>& input_shape() const { return data_.input_shape; }
  int64_t num_classes() const { return data_.num_classes; }
  // The whole description of a sample: input and target dtypes and shapes (model ABI v4).
  const DataShape& data() const { return data_; }
  // The forward pass's precision; the helper runs the autocast, the module needs not act on it.
  dpl_precision precision() const { return precision_; }

 private:
  c10::Device device_;
  DataShape data_;
  dpl_precision precision_ = DPL_PRECISION_FP32;
};

// Any sample shape, `default_shape` for hosts that do not say (the macro's input_shape argument).
inline InputShapeSpec AnyInputShape(std::vector<int64_t> default_shape) {
  InputShapeSpec spec(std::move(default_shape));
  spec.any = true;
  return spec;
}

// Any number of classes, `default_count` for hosts that do not say (the num_classes argument).
inline constexpr NumClassesSpec AnyNumClasses(int64_t default_count) {
  NumClassesSpec spec(default_count);
  spec.any = true;
  return spec;
}

template <typename Module>
std::shared_ptr<Module> ConstructModule(const ModelOptions& options) {
  if constexpr (std::is_constructible<Module, const ModelOptions&>::value) {
    return std::make_shared<Module>(options);
  } else {
    return std::make_shared<Module>();
  }
}

// Traits::Build of DPL_EXPORT_TORCH_MODEL: the module on its device, for the resolved data.
template <typename Module>
NetworkSpec BuildModule(ModelOptions& options, const BuildContext& context) {
  if (context.data.input_shape.empty() || context.data.num_classes < 1) {
    throw InvalidArgument(
        "the host does not say the data's sample shape or classes, and the model declares no "
        "default; give AnyInputShape / AnyNumClasses a default");
  }
  std::shared_ptr<Module> module = ConstructModule<Module>(options);
  module->to(context.device);
  NetworkSpec spec;
  spec.network = std::make_unique<ModuleNetwork<Module>>(std::move(module));
  spec.input_shape = context.data.input_shape;
  spec.num_classes = context.data.num_classes;
  spec.loss = Loss::kNll;
  return spec;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#if DPL_TORCH_MODEL_ABI_VERSION == 4
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v4
#define DPL_TORCH_MODEL_TABLE_FUNCTION TableV4
#elif DPL_TORCH_MODEL_ABI_VERSION == 3
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v3
#define DPL_TORCH_MODEL_TABLE_FUNCTION TableV3
#elif DPL_TORCH_MODEL_ABI_VERSION == 2
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v2
#define DPL_TORCH_MODEL_TABLE_FUNCTION TableV2
#else
#define DPL_TORCH_MODEL_TABLE_TYPE dpl_model_plugin_v1
#define DPL_TORCH_MODEL_TABLE_FUNCTION TableV1
#endif

// Exports `ModuleType` as the plugin's `dpl_model_plugin_v4` (or _v3, _v2, _v1) table.
// `input_shape` is one sample's shape as a parenthesised std::vector<int64_t> expression, e.g.
// (std::vector<int64_t>{1, 28, 28}), or dpl::torch_model::AnyInputShape({1, 28, 28});
// `num_classes` the number of output classes, or dpl::torch_model::AnyNumClasses(10).
#define DPL_EXPORT_TORCH_MODEL(ModuleType, name, version, description, input_shape, num_classes) \
  namespace {                                                                                    \
  struct DplTorchModelTraits {                                                                   \
    using Options = ::dpl::torch_model::ModelOptions;                                            \
    static constexpr const char* kName = name;                                                   \
    static constexpr const char* kVersion = version;                                             \
    static constexpr const char* kDescription = description;                                     \
    static ::dpl::torch_model::DataSpec Accepts() {                                              \
      return {::dpl::torch_model::InputShapeSpec(input_shape),                                   \
              ::dpl::torch_model::NumClassesSpec(num_classes)};                                  \
    }                                                                                            \
    static ::dpl::torch_model::NetworkSpec Build(                                                \
        Options& options, const ::dpl::torch_model::BuildContext& context) {                     \
      return ::dpl::torch_model::BuildModule<ModuleType>(options, context);                      \
    }                                                                                            \
  };                                                                                             \
  }                                                                                              \
  extern "C" {                                                                                   \
  DPL_PLUGIN_EXPORT extern const DPL_TORCH_MODEL_TABLE_TYPE dpl_torch_model_table                \
      DPL_PLUGIN_ENTRY_SYMBOL(DPL_TORCH_MODEL_TABLE_TYPE);                                       \
  const DPL_TORCH_MODEL_TABLE_TYPE dpl_torch_model_table =                                       \
      ::dpl::torch_model::Plugin<DplTorchModelTraits>::DPL_TORCH_MODEL_TABLE_FUNCTION();         \
  }

#endif  // DPL_TORCH_MODEL_HPP
