// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the network behind a
// model instance. The instance (dpl/torch_model/instance.hpp) does everything the model ABI asks
// (parameters, flat gradients, hooks, buffers, batches, steps, state files) through this small
// interface, so a C++ torch::nn::Module (ModuleNetwork, below) and a TorchScript module loaded
// from a file (models/torchscript) share all of it.
#ifndef DPL_TORCH_MODEL_NETWORK_HPP
#define DPL_TORCH_MODEL_NETWORK_HPP

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpl/support/error.hpp"
#include "dpl/torch_model/state_file.hpp"

namespace dpl {
namespace torch_model {
namespace {

// What the output of forward is compared with (labels are class indices; `...` the target's
// shape per sample: nothing for one label per sample, (T) for a label per position).
enum class Loss {
  kNll,           // output: log-probabilities (batch, ..., classes); nll_loss
  kCrossEntropy,  // output: logits (batch, ..., classes); cross_entropy (log_softmax + nll_loss)
  kMse            // output (batch, ..., classes) against the one-hot labels; mean squared error
};

inline const char* LossName(Loss loss) {
  switch (loss) {
    case Loss::kNll:
      return "nll";
    case Loss::kCrossEntropy:
      return "cross_entropy";
    case Loss::kMse:
      return "mse";
  }
  return "unknown";
}

class Network {
 public:
  virtual ~Network() = default;
  // (batch, input_shape...) -> (batch, target shape..., classes), as the network's Loss expects
  // (Note [The loss over every target element]).
  virtual torch::Tensor Forward(const torch::Tensor& input) = 0;
  virtual void SetTraining(bool training) = 0;
  virtual bool IsTraining() const = 0;
  // Every parameter and buffer with its dotted name (recursively, in registration order), the
  // tensors the network itself computes with.
  virtual NamedTensors NamedParameters() const = 0;
  virtual NamedTensors NamedBuffers() const = 0;
  // Note [A network's own training step]: a network that computes the loss and every gradient in
  // one call, without libtorch's autograd (a compiled program: models/compiled), says so here;
  // the instance then calls TrainStep instead of Forward, the loss and backward. TrainStep
  // returns the mean loss of the batch (in training mode, as the network's Loss says) and
  // overwrites `gradients`, one tensor per NamedParameters() entry of its shape, with this
  // batch's gradients of it; it updates buffers in place.
  virtual bool HasOwnTrainStep() const { return false; }
  virtual float TrainStep(const torch::Tensor& /*input*/, const torch::Tensor& /*target*/,
                          const std::vector<torch::Tensor>& /*gradients*/) {
    throw PluginError(DPL_ERR_INTERNAL, "this network has no training step of its own");
  }
  // save_state of model ABI v3: by default the state dict of every parameter and buffer.
  virtual void Save(const std::string& path) {
    NamedTensors tensors = NamedParameters();
    for (auto& buffer : NamedBuffers()) tensors.push_back(std::move(buffer));
    WriteStateDict(path, tensors);
  }
  // load_state: copies `saved` (a state file's tensors; `prefix` names it in messages) into the
  // network's own tensors. By default every parameter and buffer must be there by name with its
  // shape; everything is checked before anything is copied. Returns the names it ignored.
  virtual std::vector<std::string> Load(const NamedTensors& saved, const std::string& prefix) {
    std::map<std::string, torch::Tensor> remaining(saved.begin(), saved.end());
    NamedTensors targets = NamedParameters();
    for (auto& buffer : NamedBuffers()) targets.push_back(std::move(buffer));
    std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
    for (auto& [name, target] : targets) {
      const auto found = remaining.find(name);
      if (found == remaining.end()) {
        // DistributedDataParallel's own state_dict() names every tensor "module.<name>".
        const bool wrapped = remaining.count("module." + name) != 0;
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          prefix + " has no tensor \"" + name + "\"" +
                              (wrapped ? " but has \"module." + name +
                                             "\": a DistributedDataParallel's state dict; save "
                                             "ddp.module.state_dict() instead"
                                       : ""));
      }
      if (found->second.sizes() != target.sizes()) {
        throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                          prefix + ": tensor \"" + name + "\" has shape " +
                              c10::str(found->second.sizes()) + ", the model expects " +
                              c10::str(target.sizes()));
      }
      copies.emplace_back(target, found->second);
      remaining.erase(found);
    }
    torch::NoGradGuard no_grad;
    for (auto& [target, source] : copies) target.copy_(source);
    std::vector<std::string> ignored;
    for (const auto& entry : remaining) ignored.push_back(entry.first);
    return ignored;
  }
};

// A network and what it was built for.
struct NetworkSpec {
  std::unique_ptr<Network> network;
  std::vector<int64_t> input_shape;  // one sample
  int64_t num_classes = 0;
  Loss loss = Loss::kNll;
};

// A C++ torch::nn::Module whose `forward(torch::Tensor)` returns log-probabilities.
template <typename Module>
class ModuleNetwork : public Network {
 public:
  explicit ModuleNetwork(std::shared_ptr<Module> module) : module_(std::move(module)) {}

  torch::Tensor Forward(const torch::Tensor& input) override { return module_->forward(input); }
  void SetTraining(bool training) override { module_->train(training); }
  bool IsTraining() const override { return module_->is_training(); }
  NamedTensors NamedParameters() const override {
    return Listed(module_->named_parameters(/*recurse=*/true));
  }
  NamedTensors NamedBuffers() const override {
    return Listed(module_->named_buffers(/*recurse=*/true));
  }

  Module& module() { return *module_; }

 private:
  static NamedTensors Listed(const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
    NamedTensors listed;
    for (const auto& named : tensors) listed.emplace_back(named.key(), named.value());
    return listed;
  }

  std::shared_ptr<Module> module_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_NETWORK_HPP
