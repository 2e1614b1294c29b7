// Gradient averaging in buckets, overlapping the backward pass (after DDP's reducer): which
// buckets are complete, launched in bucket order (Note [Bucket order] in collectives/buckets.hpp)
// on the front's reduction of them (collectives/gradient_reduction.hpp).
#pragma once

#include <cstdint>
#include <future>
#include <mutex>
#include <vector>

#include "common/status.hpp"
#include "training/collectives/gradient_reduction.hpp"

namespace dpl::training {

class GradientSynchronizer {
 public:
  // Reduces `buckets` (over `parameters` parameters) through `reduction`, which must outlive it.
  GradientSynchronizer(GradientReduction& reduction, std::vector<Bucket> buckets,
                       size_t parameters);

  // Starts a step whose gradients will be summed and, unless the reduction leaves it to the
  // caller, multiplied by `scale` (1 / (world_size * accumulation)).
  void BeginStep(float scale);
  // The model's gradient-ready callback: parameter `index` is final for this step. Thread-safe.
  void OnGradientReady(uint32_t index);
  // Launches whatever is left (parameters without callbacks), waits for every bucket and the
  // reduction's end, returns the first failure.
  Status FinishStep();
  // For the C callback of the model plugin (set_gradient_ready_callback).
  static void GradientReadyTrampoline(void* self, uint32_t index);

 private:
  void LaunchReadyBucketsLocked();

  GradientReduction& reduction_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_parameter_;

  std::mutex mutex_;
  bool active_ = false;
  float scale_ = 1.0f;
  std::vector<size_t> pending_;  // per bucket: gradients not yet ready
  std::vector<bool> parameter_ready_;
  size_t next_to_launch_ = 0;
  std::vector<std::future<Status>> launched_;
};

}  // namespace dpl::training
