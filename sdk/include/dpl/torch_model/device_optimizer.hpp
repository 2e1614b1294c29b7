// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the optimizer where the
// parameters are (model ABI v4's set_optimizer, gradient_statistics, apply_update).
//
// Note [Device optimizer]: the host describes the optimizer once and each step; this runs it on
// the model's own tensors, on the model's device and stream, with its state in flat buffers there
// (one per state, the shard's elements back to back). The arithmetic is torch.optim's
// multi-tensor path of torch 1.13 (torch.optim._multi_tensor), written with the same _foreach_
// calls in the same order: on CUDA those are a few fused kernels per group of tensors, whatever
// their number, and no byte goes to the host; element for element it is the single-tensor path's
// arithmetic, which the host's own optimizer follows, so the two agree to float rounding.
// Parameter groups are the tensors of one weight decay (Note [Weight decay groups] in the
// launcher's optimizer.hpp decides them).
#ifndef DPL_TORCH_MODEL_DEVICE_OPTIMIZER_HPP
#define DPL_TORCH_MODEL_DEVICE_OPTIMIZER_HPP

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/model.h"
#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

class DeviceOptimizer {
 public:
  // `parameters`: the model's trainable tensors in index order; `flat_gradients`: their
  // gradients back to back (Note [Flat gradients]). The state is zero, as torch.optim's lazy
  // state before its first step.
  DeviceOptimizer(const dpl_optimizer_config_v4& config,
                  const std::vector<torch::Tensor>& parameters, const torch::Tensor& flat_gradients)
      : config_(config) {
    CheckKind();
    const uint64_t total = uint64_t(flat_gradients.numel());
    if (config.shard_begin > config.shard_end || config.shard_end > total) {
      throw InvalidArgument("the optimizer's shard [" + std::to_string(config.shard_begin) + ", " +
                            std::to_string(config.shard_end) + ") is not within the " +
                            std::to_string(total) + " parameter elements");
    }
    RequireNotNull(config.weight_decay, "config.weight_decay");
    const int64_t begin = int64_t(config.shard_begin), length = int64_t(config.shard_end) - begin;
    for (size_t k = 0; k < StateNames().size(); ++k) {
      states_.push_back(torch::zeros({length}, flat_gradients.options()));
    }
    shard_gradients_ = flat_gradients.narrow(0, begin, length);
    int64_t start = 0;  // of parameter i among all elements
    for (size_t i = 0; i < parameters.size(); ++i) {
      const int64_t elements = parameters[i].numel();
      const int64_t from = std::max(start, begin), to = std::min(start + elements, begin + length);
      if (from < to) {
        AddRun(parameters[i], flat_gradients, config.weight_decay[i], from - start, from,
               to - from);
      }
      start += elements;
    }
  }

  // torch.optim's names of the state, in state-index order (dpl_optimizer_kind's comment).
  std::vector<std::string> StateNames() const {
    switch (config_.kind) {
      case DPL_OPTIMIZER_SGD:
        return config_.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                                       : std::vector<std::string>{};
      case DPL_OPTIMIZER_ADADELTA:
        return {"square_avg", "acc_delta"};
      default:
        return {"exp_avg", "exp_avg_sq"};
    }
  }

  // State k, flat over the shard.
  torch::Tensor& State(size_t k) {
    if (k >= states_.size()) {
      throw InvalidArgument("the optimizer has " + std::to_string(states_.size()) +
                            " state tensors; there is no state " + std::to_string(k));
    }
    return states_[k];
  }

  // Over every gradient, float64: inf or NaN anywhere makes the sum of squares inf or NaN (a
  // float32 square cannot overflow a float64 sum), so one reduction answers both.
  static void Statistics(const torch::Tensor& flat_gradients, dpl_gradient_statistics_v4* out) {
    torch::NoGradGuard no_grad;
    constexpr int64_t kChunk = int64_t(1) << 22;  // bounds the float64 scratch to 32 MiB
    torch::Tensor sum = torch::zeros({}, flat_gradients.options().dtype(torch::kFloat64));
    for (int64_t at = 0; at < flat_gradients.numel(); at += kChunk) {
      const int64_t length = std::min(kChunk, flat_gradients.numel() - at);
      sum += flat_gradients.narrow(0, at, length).to(torch::kFloat64).square().sum();
    }
    out->squared_norm = sum.item<double>();
    out->all_finite = std::isfinite(out->squared_norm) ? 1u : 0u;
  }

  void Apply(const dpl_update_v4& update) {
    if (update.step < 1) {
      throw InvalidArgument("update step " + std::to_string(update.step) + " is not 1 or more");
    }
    torch::NoGradGuard no_grad;
    if (update.gradient_factor != 1.0) shard_gradients_.mul_(update.gradient_factor);
    for (Group& group : groups_) {
      switch (config_.kind) {
        case DPL_OPTIMIZER_SGD:
          Sgd(group, update);
          break;
        case DPL_OPTIMIZER_ADADELTA:
          Adadelta(group, update);
          break;
        default:
          Adam(group, update, config_.kind == DPL_OPTIMIZER_ADAMW);
      }
    }
  }

 private:
  // The tensors of one weight decay: views of the parameters' shard elements, their gradients
  // and their state.
  struct Group {
    double weight_decay = 0.0;
    std::vector<torch::Tensor> parameters, gradients;
    std::vector<std::vector<torch::Tensor>> states;  // [k][tensor]
  };

  void CheckKind() const {
    const int32_t kind = config_.kind;
    if (kind != DPL_OPTIMIZER_SGD && kind != DPL_OPTIMIZER_ADAM && kind != DPL_OPTIMIZER_ADAMW &&
        kind != DPL_OPTIMIZER_ADADELTA) {
      throw PluginError(DPL_ERR_UNSUPPORTED,
                        "optimizer kind " + std::to_string(kind) + " is not one this model runs");
    }
  }

  // Elements [offset, offset + count) of `parameter`, which are [at, at + count) of all (and of
  // `flat_gradients`).
  void AddRun(const torch::Tensor& parameter, const torch::Tensor& flat_gradients,
              double weight_decay, int64_t offset, int64_t at, int64_t count) {
    Group& group = GroupOf(weight_decay);
    const int64_t in_shard = at - int64_t(config_.shard_begin);
    group.parameters.push_back(parameter.detach().view({-1}).narrow(0, offset, count));
    group.gradients.push_back(flat_gradients.narrow(0, at, count));
    for (size_t k = 0; k < states_.size(); ++k) {
      group.states[k].push_back(states_[k].narrow(0, in_shard, count));
    }
  }

  Group& GroupOf(double weight_decay) {
    for (Group& group : groups_) {
      if (group.weight_decay == weight_decay) return group;
    }
    groups_.emplace_back();
    groups_.back().weight_decay = weight_decay;
    groups_.back().states.resize(states_.size());
    return groups_.back();
  }

  // The gradient with the L2 term (SGD, Adam, Adadelta), as a new list, or the group's own.
  static std::vector<torch::Tensor> WithL2(const Group& group) {
    if (group.weight_decay == 0.0) return group.gradients;
    return at::_foreach_add(group.gradients, group.parameters, group.weight_decay);
  }

  // torch.optim._multi_tensor_sgd (dampening 0, no nesterov).
  void Sgd(Group& group, const dpl_update_v4& update) const {
    std::vector<torch::Tensor> gradients = WithL2(group);
    if (config_.momentum != 0.0) {
      std::vector<torch::Tensor>& buffers = group.states[0];
      if (update.step == 1) {  // torch's first step: the buffer is a copy of the gradient
        for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(gradients[i]);
      } else {
        at::_foreach_mul_(buffers, config_.momentum);
        at::_foreach_add_(buffers, gradients, 1.0);
      }
      gradients = buffers;
    }
    at::_foreach_add_(group.parameters, gradients, -update.learning_rate);
  }

  // torch.optim._multi_tensor_adam and _multi_tensor_adamw (amsgrad off, not maximize).
  void Adam(Group& group, const dpl_update_v4& update, bool decoupled) const {
    const double lr = update.learning_rate;
    if (decoupled && group.weight_decay != 0.0) {
      at::_foreach_mul_(group.parameters, 1.0 - lr * group.weight_decay);
    }
    const std::vector<torch::Tensor> gradients = decoupled ? group.gradients : WithL2(group);
    std::vector<torch::Tensor>& exp_avgs = group.states[0];
    std::vector<torch::Tensor>& exp_avg_sqs = group.states[1];
    at::_foreach_mul_(exp_avgs, config_.beta1);
    at::_foreach_add_(exp_avgs, gradients, 1.0 - config_.beta1);
    at::_foreach_mul_(exp_avg_sqs, config_.beta2);
    at::_foreach_addcmul_(exp_avg_sqs, gradients, gradients, 1.0 - config_.beta2);
    const double bias_correction1 = 1.0 - std::pow(config_.beta1, double(update.step));
    const double bias_correction2 = 1.0 - std::pow(config_.beta2, double(update.step));
    const double step_size = lr / bias_correction1;
    std::vector<torch::Tensor> denominators = at::_foreach_sqrt(exp_avg_sqs);
    at::_foreach_div_(denominators, std::sqrt(bias_correction2));
    at::_foreach_add_(denominators, config_.eps);
    at::_foreach_addcdiv_(group.parameters, exp_avgs, denominators, -step_size);
  }

  // torch.optim._multi_tensor_adadelta.
  void Adadelta(Group& group, const dpl_update_v4& update) const {
    const std::vector<torch::Tensor> gradients = WithL2(group);
    std::vector<torch::Tensor>& square_avgs = group.states[0];
    std::vector<torch::Tensor>& acc_deltas = group.states[1];
    const double rho = config_.rho;
    at::_foreach_mul_(square_avgs, rho);
    at::_foreach_addcmul_(square_avgs, gradients, gradients, 1.0 - rho);
    std::vector<torch::Tensor> std_devs = at::_foreach_add(square_avgs, config_.eps);
    at::_foreach_sqrt_(std_devs);
    std::vector<torch::Tensor> deltas = at::_foreach_add(acc_deltas, config_.eps);
    at::_foreach_sqrt_(deltas);
    at::_foreach_div_(deltas, std_devs);
    at::_foreach_mul_(deltas, gradients);
    at::_foreach_mul_(acc_deltas, rho);
    at::_foreach_addcmul_(acc_deltas, deltas, deltas, 1.0 - rho);
    at::_foreach_add_(group.parameters, deltas, -update.learning_rate);
  }

  dpl_optimizer_config_v4 config_;  // weight_decay is borrowed for create only: not read later
  torch::Tensor shard_gradients_;   // the shard's
  std::vector<torch::Tensor> states_;
  std::vector<Group> groups_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_DEVICE_OPTIMIZER_HPP
