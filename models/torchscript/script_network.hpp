// A TorchScript module loaded from a file as the Network of the SDK helper's model instance
// (dpl/torch_model/network.hpp), and the checks that refuse a file before the first step.
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_model.hpp"
#include "matmul_rewrite.hpp"

namespace dpl::torchscript {
namespace {

using torch_model::InvalidArgument;
using torch_model::Loss;
using torch_model::NamedTensors;
using torch_model::PluginError;
using torch_model::ShapeText;

class ScriptNetwork : public torch_model::Network {
 public:
  // `batched_matmuls`: its aten::matmul calls were rewritten (Note [TorchScript's batched
  // products]), which Save undoes in the copy it writes.
  ScriptNetwork(torch::jit::Module module, std::string file, bool batched_matmuls = false)
      : module_(std::move(module)), file_(std::move(file)), batched_matmuls_(batched_matmuls) {}

  // Note [Running TorchScript unoptimised]: the module runs in the interpreter op by op, as
  // torch.jit.optimized_execution(False) runs it in Python, so every op goes through libtorch's
  // dispatcher and autograd as eager code does. The graph executor's optimised plan (profiled,
  // specialised on dtypes and shapes, differentiated by the JIT's autodiff) did not follow the
  // autocast set around the call: under bf16 the recipe's scripted ConvNet returned float32
  // log-probabilities and ran hardly faster than in fp32; unoptimised it computes as eager code
  // in both precisions, as fast in fp32 and much faster in bf16 (docs/precision.md). The plan
  // would also re-specialise for every new batch size.
  torch::Tensor Forward(const torch::Tensor& input) override {
    torch::jit::GraphOptimizerEnabledGuard unoptimised(false);
    const c10::IValue output = module_.forward({input});
    if (!output.isTensor()) {
      throw InvalidArgument("TorchScript file " + file_ + ": forward returns a " +
                            output.tagKind() + ", not one tensor of class scores");
    }
    return output.toTensor();
  }
  void SetTraining(bool training) override { module_.train(training); }
  bool IsTraining() const override { return module_.is_training(); }
  // Note [Tied parameters]: a tensor held under two names (a GPT's output weights tied to its
  // token embedding) is one parameter, listed under its first name, as torch.nn.Module's
  // named_parameters() lists it; TorchScript's lists every name, and a tensor listed twice would
  // have its gradient summed twice and be updated twice a step.
  NamedTensors NamedParameters() const override {
    NamedTensors listed;
    std::set<const void*> seen;
    for (const auto& named : module_.named_parameters(/*recurse=*/true)) {
      if (seen.insert(named.value.unsafeGetTensorImpl()).second) {
        listed.emplace_back(named.name, named.value);
      }
    }
    return listed;
  }
  NamedTensors NamedBuffers() const override {
    NamedTensors listed;
    for (const auto& named : module_.named_buffers(/*recurse=*/true)) {
      listed.emplace_back(named.name, named.value);
    }
    return listed;
  }
  // The trained module as torch.jit.save writes it, in eval mode: torch.jit.load(path) in
  // Python gives a module ready for inference.
  void Save(const std::string& path) override {
    torch::jit::Module saved = module_;
    if (batched_matmuls_) {
      saved = module_.clone();  // its own graphs: the module that trains keeps its operator
      RewriteMatmuls(saved, /*to_batched=*/false);
    }
    const bool was_training = saved.is_training();
    saved.eval();
    try {
      saved.save(path);
    } catch (const c10::Error& error) {
      saved.train(was_training);
      throw PluginError(DPL_ERR_IO,
                        "cannot write state file " + path + ": " + error.what_without_backtrace());
    }
    saved.train(was_training);
  }

  torch::jit::Module& module() { return module_; }

 private:
  torch::jit::Module module_;
  std::string file_;
  bool batched_matmuls_;
};

// The module in `file` on `device`, refusing what is no TorchScript archive with the reason.
inline torch::jit::Module LoadScriptModule(const std::string& file, c10::Device device) {
  const std::string prefix = "TorchScript file " + file;
  char magic[4] = {};
  {
    std::ifstream stream(file, std::ios::binary);
    if (!stream) {
      throw PluginError(DPL_ERR_IO, prefix + " cannot be read: " + std::strerror(errno));
    }
    stream.read(magic, sizeof magic);
  }
  const std::string how =
      "write it with torch.jit.save(torch.jit.script(module), path) or "
      "tools/export_model.py";
  if (std::memcmp(magic, "PK\x03\x04", sizeof magic) != 0) {
    throw InvalidArgument(prefix + " is not a TorchScript archive (not a zip file); " + how);
  }
  try {
    caffe2::serialize::PyTorchStreamReader archive(file);
    if (!archive.hasRecord("constants.pkl")) {
      throw InvalidArgument(prefix + " is not a TorchScript archive" +
                            (archive.hasRecord("data.pkl")
                                 ? std::string(" but a torch.save file (a pickle, such as a "
                                               "state dict)")
                                 : std::string()) +
                            "; " + how);
    }
    return torch::jit::load(file, device);
  } catch (const c10::Error& error) {
    throw InvalidArgument(
        prefix + " is not a loadable TorchScript archive: " + error.what_without_backtrace());
  }
}

// Parameters must be what the model ABI trains: float32, contiguous; there must be some.
inline void CheckParameters(const torch::jit::Module& module, const std::string& file) {
  int trainable = 0;
  for (const auto& named : module.named_parameters(/*recurse=*/true)) {
    if (!named.value.requires_grad()) continue;
    ++trainable;
    if (named.value.scalar_type() != torch::kFloat32) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "TorchScript file " + file + ": parameter " + named.name + " is " +
                            c10::toString(named.value.scalar_type()) +
                            "; dpl trains float32 parameters (call module.float() before saving)");
    }
    if (!named.value.is_contiguous()) {
      throw PluginError(DPL_ERR_UNSUPPORTED, "TorchScript file " + file + ": parameter " +
                                                 named.name + " is not contiguous");
    }
  }
  if (trainable == 0) {
    throw InvalidArgument("TorchScript file " + file +
                          ": the module has no parameters to train (none with requires_grad)");
  }
}

// The last non-empty line of an error: the interpreter's message after its TorchScript traceback.
inline std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of("\n ");
  if (end == std::string::npos) return text;
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// The checks of Note [Checking forward at create] on the probe's `output` for a batch of `sizes`:
// (2, target shape..., classes), and log-probabilities for loss=nll.
inline void CheckProbeOutput(const torch::Tensor& output, const std::vector<int64_t>& sizes,
                             const torch_model::BuildContext& context, Loss loss,
                             const std::string& prefix) {
  const int64_t classes = context.data.num_classes;
  const std::vector<int64_t>& target_shape = context.data.target_shape;
  std::vector<int64_t> leading{2};
  leading.insert(leading.end(), target_shape.begin(), target_shape.end());
  const auto dims = static_cast<int64_t>(leading.size());
  const bool fits = output.dim() == dims + 1 &&
                    output.sizes().slice(0, size_t(dims)) == c10::IntArrayRef(leading) &&
                    output.size(-1) >= 1 && (classes == 0 || output.size(-1) == classes);
  if (!fits) {
    std::string wanted = "(2";
    for (int64_t extent : target_shape) wanted += ", " + std::to_string(extent);
    wanted += ", " + (classes > 0 ? std::to_string(classes) : std::string("classes")) + ")";
    throw InvalidArgument(prefix + ": forward returns shape " + ShapeText(output.sizes()) +
                          " for a batch of shape " + ShapeText(sizes) + "; the " +
                          torch_model::LossName(loss) + " loss needs " + wanted +
                          (target_shape.empty() ? ", one row of class scores per sample"
                                                : ", a row of class scores per target element"));
  }
  if (loss != Loss::kNll) return;
  const torch::Tensor rows = output.reshape({-1, output.size(-1)}).to(torch::kFloat64);
  const double worst = (rows.exp().sum(1) - 1.0).abs().max().item<double>();
  if (!(worst <= 1e-3)) {
    const double sum = rows[0].exp().sum().item<double>();
    std::ostringstream text;
    text << prefix
         << ": with loss=nll forward must return log-probabilities (end it with "
            "log_softmax), but on a zero batch exp(output) sums to "
         << std::setprecision(3) << sum
         << " over the classes, not 1; use loss=cross_entropy for a module that "
         << "returns logits";
    throw InvalidArgument(text.str());
  }
}

// Note [Checking forward at create]: the output must fit the loss before the first step, so
// create runs forward once, in eval mode and without gradients, on a batch of two zero samples of
// the data's shape and input dtype (integer input: token id 0, as int64). It must return one
// tensor (2, target shape..., classes): (2, classes) for one label per sample, (2, T, classes) for
// a label per position (classes = the data's, when the host says). For loss=nll it must be
// log-probabilities: the exp() of every row of classes sums to 1 (within 1e-3).
// That holds for any input when forward ends with log_softmax, and only by chance for logits, so
// a module returning logits is refused with loss=nll (cross_entropy is the loss for logits). The
// probe leaves no trace: buffers (a traced BatchNorm updates its statistics even in eval mode) and
// the random generators are restored. Returns the number of classes.
inline int64_t CheckForward(ScriptNetwork& network, const torch_model::BuildContext& context,
                            Loss loss, const std::string& file) {
  const std::string prefix = "TorchScript file " + file;
  std::vector<int64_t> sizes{2};
  sizes.insert(sizes.end(), context.data.input_shape.begin(), context.data.input_shape.end());
  const torch::ScalarType input_type =
      torch_model::IsIntegerType(context.data.input_dtype) ? torch::kInt64 : torch::kFloat32;
  torch::NoGradGuard no_grad;
  torch_model::RngStateKeeper keep_rng(context.device);
  NamedTensors buffers = network.NamedBuffers();
  std::vector<torch::Tensor> saved_buffers;
  for (const auto& named : buffers) saved_buffers.push_back(named.second.clone());
  network.SetTraining(false);
  torch::Tensor output;
  try {
    output = network.Forward(
        torch::zeros(sizes, torch::TensorOptions().device(context.device).dtype(input_type)));
  } catch (const PluginError&) {
    throw;
  } catch (const std::exception& error) {  // the interpreter's errors are not all c10::Errors
    throw InvalidArgument(prefix + ": forward fails on a zero batch of shape " + ShapeText(sizes) +
                          " (the data's samples are " + ShapeText(context.data.input_shape) +
                          "): " + LastLine(error.what()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second.copy_(saved_buffers[i]);
  network.SetTraining(true);
  CheckProbeOutput(output, sizes, context, loss, prefix);
  return output.size(-1);
}

// Note [Traced modules keep their mode]: torch.jit.trace records Python's bools as constants,
// so a traced BatchNorm or dropout runs in the mode the module was traced in whatever set_mode
// says (traced in train mode: eval_step normalises with batch statistics, updates the running
// ones and drops out). Such a module still trains; the log says which op ignores the mode.
inline void WarnAboutFixedModes(const torch::jit::Module& module,
                                const torch_model::BuildContext& context, const std::string& file) {
  std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  const std::vector<std::pair<std::string, size_t>> mode_inputs = {
      {"aten::batch_norm", 5},      {"aten::instance_norm", 5}, {"aten::dropout", 2},
      {"aten::feature_dropout", 2}, {"aten::alpha_dropout", 2}, {"aten::feature_alpha_dropout", 2}};
  std::vector<std::string> fixed;
  for (const torch::jit::Node* node : graph->nodes()) {
    for (const auto& [kind, input] : mode_inputs) {
      if (std::string(node->kind().toQualString()) != kind || node->inputs().size() <= input) {
        continue;
      }
      const c10::optional<c10::IValue> training = torch::jit::toIValue(node->input(input));
      if (training && training->isBool()) {
        const std::string text = kind.substr(6) + (training->toBool() ? " (train)" : " (eval)");
        if (std::find(fixed.begin(), fixed.end(), text) == fixed.end()) fixed.push_back(text);
      }
    }
  }
  if (fixed.empty()) return;
  std::string names;
  for (const auto& text : fixed) names += (names.empty() ? "" : ", ") + text;
  context.Log(DPL_LOG_WARNING,
              "TorchScript file " + file + ": " + names +
                  " run in the mode shown whatever train/eval mode is set (the mode is recorded "
                  "when a module is traced); script the module (torch.jit.script, "
                  "tools/export_model.py without --trace) for layers that follow the mode");
}

}  // namespace
}  // namespace dpl::torchscript
