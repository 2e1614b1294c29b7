// A package of tools/compile_model.py as the Network of the SDK helper's model instance
// (dpl/torch_model/network.hpp): the parameters and buffers are the plugin's own tensors, and the
// package's two programs, loaded with libtorch's AOTInductor loader, compute with them.
#pragma once

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_model.hpp"
#include "package.hpp"

namespace dpl::compiled {
namespace {

using torch_model::NamedTensors;

// Note [The compiled step's calling convention]: the training program takes the parameters, the
// buffers, one tensor per parameter for its gradient and the batch (input, target), writes each
// gradient into its tensor and each buffer the step updates into the buffer, and returns
// (loss,); the evaluation program takes the parameters, the buffers and the input and returns
// (scores,). Both are AOTInductor programs: no autograd, no Python, the batch of any size.
// Inductor writes most gradients straight into the tensors given (a matrix product's gradient it
// copies there from its own buffer, docs/compiled.md), so the gradients land in the instance's
// flat gradients (Note [Flat gradients]) with no copy of the plugin's.
class CompiledNetwork : public torch_model::Network {
 public:
  CompiledNetwork(PackageDescription description, std::vector<torch::Tensor> values,
                  c10::Device device)
      : description_(std::move(description)) {
    const size_t count = description_.parameters.size();
    for (size_t i = 0; i < values.size(); ++i) {
      // Parameters require grad so the instance lists them as parameters; no autograd runs.
      if (i < count) values[i].set_requires_grad(true);
      (i < count ? parameters_ : buffers_).push_back(values[i]);
    }
    const c10::DeviceIndex index = device.is_cuda() ? device.index() : -1;
    train_ = Load("train", index);
    eval_ = Load("eval", index);
  }

  // The evaluation program (eval mode: the instance calls Forward only to evaluate). The host's
  // autocast is off around it: the package computes in the precision it was made for, and the
  // libtorch calls its kernels make must not be cast again.
  torch::Tensor Forward(const torch::Tensor& input) override {
    torch::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    std::vector<torch::Tensor> inputs = State();
    inputs.push_back(input);
    return Run(*eval_, "eval", std::move(inputs)).at(0);
  }

  bool HasOwnTrainStep() const override { return true; }

  float TrainStep(const torch::Tensor& input, const torch::Tensor& target,
                  const std::vector<torch::Tensor>& gradients) override {
    torch::NoGradGuard no_grad;
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    std::vector<torch::Tensor> inputs = State();
    inputs.insert(inputs.end(), gradients.begin(), gradients.end());
    inputs.push_back(input);
    inputs.push_back(target);
    const float loss = Run(*train_, "train", std::move(inputs)).at(0).item<float>();
    if (input.size(0) == 1) RefuseBuffersNotFiniteAfterOneSample();
    return loss;
  }

  void SetTraining(bool training) override { training_ = training; }
  bool IsTraining() const override { return training_; }

  NamedTensors NamedParameters() const override {
    NamedTensors listed;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      listed.emplace_back(description_.parameters[i].name, parameters_[i]);
    }
    return listed;
  }
  NamedTensors NamedBuffers() const override {
    NamedTensors listed;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      listed.emplace_back(description_.buffers[i].name, buffers_[i]);
    }
    return listed;
  }

  // The module's state_dict(): every parameter under each of its names (a tied weight under
  // both), then the buffers, so it loads strictly into the Python class.
  void Save(const std::string& path) override {
    NamedTensors tensors;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      tensors.emplace_back(description_.parameters[i].name, parameters_[i]);
      for (const auto& alias : description_.parameters[i].aliases) {
        tensors.emplace_back(alias, parameters_[i]);
      }
    }
    for (auto& buffer : NamedBuffers()) tensors.push_back(std::move(buffer));
    torch_model::WriteStateDict(path, tensors);
  }

  // A state dict that names a tied weight by any of its names; the others are not "ignored".
  std::vector<std::string> Load(const NamedTensors& saved, const std::string& prefix) override {
    NamedTensors renamed;
    std::map<std::string, std::string> primary;
    for (const auto& parameter : description_.parameters) {
      for (const auto& alias : parameter.aliases) primary[alias] = parameter.name;
    }
    std::set<std::string> present;
    for (const auto& [name, tensor] : saved) present.insert(name);
    for (const auto& [name, tensor] : saved) {
      const auto alias = primary.find(name);
      if (alias == primary.end()) {
        renamed.emplace_back(name, tensor);
      } else if (!present.count(alias->second)) {
        renamed.emplace_back(alias->second, tensor);
        present.insert(alias->second);
      }
    }
    return Network::Load(renamed, prefix);
  }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> Load(const char* program,
                                                                c10::DeviceIndex index) {
    try {
      return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          description_.file, program, /*run_single_threaded=*/false, /*num_runners=*/1, index);
    } catch (const c10::Error& error) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "package " + description_.file + ": AOTInductor cannot load its " +
                            program + " program: " + error.what_without_backtrace());
    }
  }

  // BatchNorm over a batch of one value per channel (BatchNorm1d and one sample) divides by zero
  // for its unbiased running variance: eager PyTorch refuses such a batch ("Expected more than 1
  // value per channel when training"), the compiled step writes NaN into running_var and trains
  // on. A step of one sample that left a buffer not finite is refused as PyTorch refuses it.
  void RefuseBuffersNotFiniteAfterOneSample() const {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const torch::Tensor& buffer = buffers_[i];
      if (!buffer.is_floating_point() || torch::isfinite(buffer).all().item<bool>()) continue;
      throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                        "package " + description_.file + ": a training batch of one sample made " +
                            "its buffer " + description_.buffers[i].name +
                            " not finite (BatchNorm needs more than one value per channel in " +
                            "training, as PyTorch says); choose a --batch-size that leaves no " +
                            "rank a batch of one sample, or --drop-last");
    }
  }

  std::vector<torch::Tensor> State() const {
    std::vector<torch::Tensor> state(parameters_);
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    return state;
  }

  std::vector<torch::Tensor> Run(torch::inductor::AOTIModelPackageLoader& program, const char* name,
                                 std::vector<torch::Tensor> inputs) {
    try {
      return program.run(inputs);
    } catch (const c10::Error& error) {
      throw PluginError(DPL_ERR_INTERNAL, "package " + description_.file + ": its " + name +
                                              " program failed: " + error.what_without_backtrace());
    }
  }

  PackageDescription description_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> train_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> eval_;
  bool training_ = true;
};

}  // namespace
}  // namespace dpl::compiled
