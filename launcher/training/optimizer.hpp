// Optimizers on the model's float32 CPU parameter buffers, with torch.optim's exact update
// order (torch 1.13, single-tensor "foreach=False" path), so a run matches PyTorch step for step.
// Every rank applies the same update to bit-identical parameters and averaged gradients, so
// parameters stay bit-identical without further communication.
//
// Note [Weight decay groups]: which tensors --weight-decay applies to. AdamW (decoupled decay)
// decays the tensors of two or more dimensions only -- the weights of linear and convolution
// layers and embeddings -- and never biases or norm weights, as nanoGPT's configure_optimizers
// builds its two param groups, the rule transformer recipes train with; --decay-all decays every
// tensor, as torch.optim.AdamW(model.parameters()) does. SGD, Adam and Adadelta add the decay to
// the gradient (an L2 term) of every tensor, as torch.optim with one param group does and as
// torchvision's recipes for these optimizers expect.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/model.h"
#include "training/config.hpp"
#include "training/thread_pool.hpp"

namespace dpl::training {

// An optimizer's state as a checkpoint holds it: state[k][p] is state k (Optimizer::StateNames)
// of parameter p, whole.
using OptimizerState = std::vector<std::vector<std::vector<float>>>;

// One parameter tensor as the optimizer sees it (or, sharded, one run of a tensor's elements).
struct OptimizedTensor {
  size_t elements = 0;
  bool decayed = true;  // whether --weight-decay applies to it (Note [Weight decay groups])
};

// Whether a tensor of `ndim` dimensions is decayed by `kind` (Note [Weight decay groups]).
bool DecaysTensor(OptimizerKind kind, bool decay_all, int ndim);

// torch.optim's names of `kind`'s per-parameter state ("exp_avg", ...), in the order of the
// optimizer's state buffers and of the model ABI's optimizer state indices.
std::vector<std::string> StateNamesOf(OptimizerKind kind);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates all parameters once. `parameters[i]` and `gradients[i]` hold the elements of tensor
  // i as given at creation.
  void Step(const std::vector<float*>& parameters, const std::vector<const float*>& gradients);
  // The same step in parts, as Step runs it on its threads (set_threads): BeginStep(), then
  // UpdateSlice for each slice (every element of every tensor once, in any order), then
  // EndStep(). An element's update depends on its own parameter, gradient and state only, so
  // slices give the same bits as one pass over whole tensors.
  void BeginStep();
  // Elements [offset, offset + count) of tensor `tensor`; `parameters` and `gradients` point at
  // element `offset`.
  void UpdateSlice(size_t tensor, size_t offset, size_t count, float* parameters,
                   const float* gradients);
  void EndStep();

  // The state to checkpoint: every buffer, in a fixed order, plus the step counter. The buffers
  // are StateNames()[k] of every parameter in turn: buffer k * parameters + i is state k of
  // parameter i.
  virtual std::vector<std::vector<float>*> StateBuffers() = 0;
  // torch.optim's names of the per-parameter state ("exp_avg", ...).
  std::vector<std::string> StateNames() const { return StateNamesOf(options_.kind); }
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // The learning rate of the following steps. A schedule sets it before every step, as
  // torch.optim.lr_scheduler writes param_group['lr'] (see lr_schedule.hpp).
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double learning_rate) { learning_rate_ = learning_rate; }
  const std::vector<OptimizedTensor>& tensors() const { return tensors_; }
  // The threads Step's element-wise update is split over (NULL: the caller's alone). The update of
  // an element never depends on another's, so every thread count gives the same bits.
  void set_threads(ThreadPool* pool) { pool_ = pool; }

 protected:
  Optimizer(const OptimizerOptions& options, std::vector<OptimizedTensor> tensors);
  // The scalars of step number `step` (from 1) at the current learning rate.
  virtual void Prepare(int64_t step) = 0;
  // UpdateSlice after Prepare; `weight_decay` is tensor `tensor`'s (0 when it is not decayed).
  virtual void Update(size_t tensor, size_t offset, size_t count, float weight_decay,
                      float* __restrict p, const float* __restrict g) = 0;
  // A zero buffer per tensor.
  std::vector<std::vector<float>> ZeroBuffers() const;

  OptimizerOptions options_;
  std::vector<OptimizedTensor> tensors_;
  int64_t steps_ = 0;
  double learning_rate_;

 private:
  std::vector<size_t> starts_;  // of each tensor among all the elements, and their total last
  ThreadPool* pool_ = nullptr;
};

// An optimizer the host can run: Note [Adding an optimizer] in optimizer.cpp.
struct OptimizerType {
  OptimizerKind kind;
  // torch.optim's names of its per-parameter state, in the order of its state buffers and of the
  // model ABI's optimizer state indices.
  std::vector<std::string> state_names;
  // Model ABI v4's kind, for a model that runs its optimizer on its device (dpl/model_v4.h).
  std::optional<dpl_optimizer_kind> on_device;
  std::unique_ptr<Optimizer> (*create)(const OptimizerOptions& options,
                                       std::vector<OptimizedTensor> tensors);
};

// Every optimizer, and the one of `kind` (NULL when there is none).
const std::vector<OptimizerType>& OptimizerTypes();
const OptimizerType* FindOptimizerType(OptimizerKind kind);

// Builds the optimizer options.kind names for `tensors`.
Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   std::vector<OptimizedTensor> tensors);

}  // namespace dpl::training
