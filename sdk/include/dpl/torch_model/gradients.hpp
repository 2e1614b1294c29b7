// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the gradients of a model
// instance, views into one flat buffer that the next backward after zero_gradients replaces.
#ifndef DPL_TORCH_MODEL_GRADIENTS_HPP
#define DPL_TORCH_MODEL_GRADIENTS_HPP

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dpl {
namespace torch_model {
namespace {

// Note [Flat gradients]: every gradient is a view into one buffer, in parameter order (DDP's
// gradient_as_bucket_view). A grad that exists before backward is accumulated into in place
// (grad mode is off during backward), so the views never go stale, the host reduces a bucket of
// neighbouring gradients with one collective and no copy, and zeroing is one kernel.
//
// Note [Replaced gradients]: accumulating into zeroed gradients costs a whole-model pass to
// zero them and, in backward, a read of the zeros and the new gradient and a write of their sum.
// So zero_gradients writes nothing: the next backward's gradients replace the old ones. Before
// that backward each grad is released, autograd hands its freshly computed gradient over as the
// parameter's grad (it does not add to an undefined one), and the ready hook copies it into the
// view and puts the view back, while the gradient is still in cache. A parameter that got no
// gradient is zeroed after backward. Later micro-steps of --grad-accum accumulate as before. The
// copy costs what the accumulation did; the zeroing pass is what is saved (docs/performance.md).
// The host reads gradients only after a train_step (model_v4.h's zero_gradients); the SDK's own
// readers settle a pending zero first.
class FlatGradients {
 public:
  // Gives each of `parameters` (float32, contiguous, on `device`) its view of a zeroed buffer.
  void Bind(std::vector<torch::Tensor>& parameters, c10::Device device) {
    torch::NoGradGuard no_grad;
    int64_t elements = 0;
    for (const auto& parameter : parameters) elements += parameter.numel();
    flat_ = torch::zeros({elements}, torch::TensorOptions().device(device).dtype(torch::kFloat32));
    parameters_ = &parameters;
    MakeViews();
    replaced_.assign(parameters.size(), 0);
  }

  // Moves the buffer, its values with it, into `memory` (host memory that outlives the model);
  // between backward passes only.
  void MoveTo(float* memory) {
    torch::NoGradGuard no_grad;
    torch::Tensor moved =
        torch::from_blob(memory, {flat_.numel()}, torch::TensorOptions().dtype(torch::kFloat32));
    moved.copy_(flat_);
    flat_ = moved;
    MakeViews();
  }

  // The buffer, a pending zero settled.
  const torch::Tensor& flat() {
    Settle();
    return flat_;
  }
  const torch::Tensor& view(size_t index) {
    Settle();
    return views_[index];
  }

  // zero_gradients: the next backward replaces every gradient.
  void Zero() { replace_ = true; }

  // Writes a pending zero, for a reader between zero_gradients and the next backward.
  void Settle() {
    if (!replace_) return;
    torch::NoGradGuard no_grad;
    flat_.zero_();
    replace_ = false;
  }

  // Around one backward: releases the grads it replaces; afterwards every view is back, zeroed
  // where backward gave no gradient (also when backward threw).
  class Backward {
   public:
    explicit Backward(FlatGradients& gradients) : gradients_(gradients) { gradients_.Release(); }
    ~Backward() { gradients_.Restore(); }
    Backward(const Backward&) = delete;
    Backward& operator=(const Backward&) = delete;

   private:
    FlatGradients& gradients_;
  };

  // Note [A network's own training step] (network.hpp): the tensors such a network writes this
  // step's gradients into. After zero_gradients, the views themselves (the step replaces them);
  // otherwise (--grad-accum's later micro-steps) a scratch buffer's, which Collect adds to them.
  const std::vector<torch::Tensor>& StepTargets() {
    accumulate_ = !replace_;
    replace_ = false;
    if (!accumulate_) return views_;
    if (!scratch_.defined()) {
      scratch_ = torch::empty_like(flat_);
      int64_t offset = 0;
      for (auto& parameter : *parameters_) {
        scratch_views_.push_back(
            scratch_.narrow(0, offset, parameter.numel()).view(parameter.sizes()));
        offset += parameter.numel();
      }
    }
    return scratch_views_;
  }
  // After the step StepTargets served: the gradients times `scale` (the loss scale) added, or in
  // place.
  void Collect(float scale) {
    torch::NoGradGuard no_grad;
    if (accumulate_) {
      if (scale != 1.0f) scratch_.mul_(scale);
      flat_.add_(scratch_);
    } else if (scale != 1.0f) {
      flat_.mul_(scale);
    }
  }

  // From gradient `index`'s ready hook, before the host hears of it: a replacing gradient goes
  // into its view.
  void Arrived(uint32_t index) {
    if (replaced_[index] == 0) return;
    torch::NoGradGuard no_grad;
    torch::Tensor& grad = (*parameters_)[index].mutable_grad();
    if (grad.defined()) views_[index].copy_(grad);
    grad = views_[index];
    replaced_[index] = 0;
  }

 private:
  // Each parameter's grad becomes its view of flat_, in parameter order.
  void MakeViews() {
    views_.clear();
    int64_t offset = 0;
    for (auto& parameter : *parameters_) {
      views_.push_back(flat_.narrow(0, offset, parameter.numel()).view(parameter.sizes()));
      parameter.mutable_grad() = views_.back();
      offset += parameter.numel();
    }
  }

  void Release() {
    if (!replace_) return;
    for (size_t i = 0; i < views_.size(); ++i) {
      (*parameters_)[i].mutable_grad().reset();
      replaced_[i] = 1;
    }
    replace_ = false;
  }

  void Restore() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < views_.size(); ++i) {
      if (replaced_[i] == 0) continue;
      views_[i].zero_();
      (*parameters_)[i].mutable_grad() = views_[i];
      replaced_[i] = 0;
    }
  }

  torch::Tensor flat_;
  std::vector<torch::Tensor>* parameters_ = nullptr;
  std::vector<torch::Tensor> views_;
  // Set by zero_gradients until the next backward; per gradient, whether that backward has yet
  // to replace it (written by the hook of that gradient only).
  bool replace_ = false;
  std::vector<uint8_t> replaced_;
  // StepTargets' scratch buffer and its views, made the first time a step accumulates.
  bool accumulate_ = false;
  torch::Tensor scratch_;
  std::vector<torch::Tensor> scratch_views_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_GRADIENTS_HPP
