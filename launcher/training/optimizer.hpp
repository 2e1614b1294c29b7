// Optimizers on the model's float32 CPU parameter buffers, with torch.optim's exact update
// order (torch 1.13, single-tensor "foreach=False" path), so a run matches PyTorch step for step.
// Every rank applies the same update to bit-identical parameters and averaged gradients, so
// parameters stay bit-identical without further communication.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/thread_pool.hpp"

namespace dpl::training {

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdadelta;
  double learning_rate = 0.5;
  double momentum = 0.0;  // sgd
  double rho = 0.9;       // adadelta
  double eps = 1e-6;      // adadelta (adam uses adam_eps)
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Updates all parameters once. `parameters[i]` and `gradients[i]` hold `sizes[i]` floats and
  // match the sizes given at creation.
  virtual void Step(const std::vector<float*>& parameters,
                    const std::vector<const float*>& gradients) = 0;
  // The state to checkpoint: every buffer, in a fixed order, plus the step counter. The buffers
  // are StateNames()[k] of every parameter in turn: buffer k * parameters + i is state k of
  // parameter i.
  virtual std::vector<std::vector<float>*> StateBuffers() = 0;
  // torch.optim's names of the per-parameter state ("exp_avg", ...).
  virtual std::vector<std::string> StateNames() const = 0;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }
  // The learning rate of the following steps. A schedule sets it before every step, as
  // torch.optim.lr_scheduler writes param_group['lr'] (see lr_schedule.hpp).
  double learning_rate() const { return learning_rate_; }
  void set_learning_rate(double learning_rate) { learning_rate_ = learning_rate; }
  // The threads the element-wise update is split over (NULL: the caller's alone). The update of
  // an element never depends on another's, so every thread count gives the same bits.
  void set_threads(ThreadPool* pool) { pool_ = pool; }

 protected:
  Optimizer(double learning_rate, const std::vector<size_t>& sizes);
  // Calls update(t, begin, end) for ranges [begin, end) of buffer t that together cover every
  // element of every buffer once, on the pool's threads.
  void ForEachRange(const std::function<void(size_t t, size_t begin, size_t end)>& update) const;

  int64_t steps_ = 0;
  double learning_rate_;

 private:
  std::vector<size_t> starts_;  // of each buffer in all the elements, and their total last
  ThreadPool* pool_ = nullptr;
};

// Builds the optimizer options.kind names for parameters of `sizes` elements each.
Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   const std::vector<size_t>& sizes);

}  // namespace dpl::training
