// Gradient averaging in buckets, overlapping the backward pass (after DDP's reducer).
//
// Note [Bucket order]: buckets are formed over the parameters in REVERSE order (autograd
// produces the last layer's gradients first). As in DDP's reducer, a bucket is closed as soon as
// it holds at least its cap: the FIRST bucket's cap is kFirstBucketCapBytes (1 MiB), every later
// one's bucket_cap_bytes. The small first bucket is what lets communication start early in the
// backward pass; with one 25 MiB bucket a small model (ConvNet: 1.2 MB) would wait for its whole
// backward before sending anything. A bucket is launched once all its gradients are ready,
// but buckets are always launched in bucket-index order, so every rank issues the same sequence
// of collectives even if its gradients become ready in a different order. All backend calls run
// on one communication thread (CommunicationThread), which serialises them as the ABI requires.
//
// Note [Buckets in place]: when a bucket's gradients lie back to back in memory (the dpl torch
// helper makes every gradient a view into one buffer), the bucket is reduced in place with ONE
// collective on that stretch of memory: no staging copy, and it works on device memory the host
// cannot touch. Otherwise host gradients are staged through one flat buffer, and device
// gradients get one collective each.
#pragma once

#include <cstdint>
#include <future>
#include <mutex>
#include <optional>
#include <vector>

#include "common/status.hpp"
#include "training/backend.hpp"
#include "training/communication_thread.hpp"
#include "training/config.hpp"

namespace dpl::training {

struct Bucket {
  std::vector<uint32_t> parameter_indices;  // in launch order (reverse parameter order)
  size_t elements = 0;
};

// DDP's first-bucket cap (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES).
inline constexpr int64_t kFirstBucketCapBytes = 1024 * 1024;

// Splits parameters of `parameter_elements[i]` float32 elements into buckets (Note [Bucket order]).
std::vector<Bucket> AssignBuckets(const std::vector<size_t>& parameter_elements,
                                  int64_t bucket_cap_bytes);

// What a synchronizer does with a bucket instead of the backend's allreduce: reduce it through the
// machine's shared memory (local_reduce.hpp), or reduce-scatter it for the sharded optimizer
// (shard.hpp). Host memory only; the reduction scales the sums itself.
class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  // The collective's name in stall reports and traces.
  virtual const char* name() const = 0;
  virtual void BeginStep() {}
  // On the communication thread, bucket after bucket in index order.
  virtual Status Reduce(size_t bucket, float scale) = 0;
  // After the last bucket's Reduce returned, on the caller's thread.
  virtual Status Finish() = 0;
};

// Whether the synchronizer finishes the average itself, or leaves the summed gradients for the
// caller to scale (device memory the host cannot touch).
enum class GradientScaling { kInBucket, kByCaller };

class GradientSynchronizer {
 public:
  // `gradients` are float32, compact, all in host memory (kDLCPU) or all on one device. With
  // kByCaller (required for device memory) the gradients end up summed, not averaged, and no
  // compression is possible; the constructor's caller checks that. `stream` is the stream that
  // produces device gradients (the model's; NULL for host memory and the legacy default stream).
  GradientSynchronizer(Backend* backend, CommunicationThread* thread, int world_size,
                       std::vector<DLTensor> gradients, std::vector<Bucket> buckets,
                       GradientCompression compression, GradientScaling scaling,
                       void* stream = nullptr);

  // Buckets of host gradients reduced by `reduction` (not owned) instead of the backend.
  GradientSynchronizer(CommunicationThread* thread, std::vector<DLTensor> gradients,
                       std::vector<Bucket> buckets, BucketReduction* reduction);

  // Starts a step whose gradients will be summed and, with kInBucket, multiplied by `scale`
  // (1 / (world_size * accumulation)).
  void BeginStep(float scale);
  // The model's gradient-ready callback: parameter `index` is final for this step. Thread-safe.
  void OnGradientReady(uint32_t index);
  // Launches whatever is left (parameters without callbacks), waits for every bucket, returns the
  // first failure. After it returns, every gradient holds the sum over ranks times the scale
  // (kInBucket), or the bare sum, ordered before later work on the stream (kByCaller).
  Status FinishStep();
  GradientScaling scaling() const { return scaling_; }
  // For the C callback of the model plugin (set_gradient_ready_callback).
  static void GradientReadyTrampoline(void* self, uint32_t index);

 private:
  Status ReduceBucket(size_t bucket_index);
  // The other workers' parts of a reduction (reduction_->Finish), waited for on the calling
  // thread and watched as a collective is, so that a peer stopped in its part gets a stall post.
  Status AwaitReduction();
  Status ReduceHostFloats(float* data, size_t elements);
  Status Allreduce(DLTensor tensor);
  void LaunchReadyBucketsLocked();

  Backend* backend_;
  BucketReduction* reduction_ = nullptr;  // instead of the backend's allreduce, when set
  CommunicationThread* thread_;
  int world_size_;
  std::vector<DLTensor> gradients_;
  std::vector<Bucket> buckets_;
  // Per bucket: one tensor over all its gradients when they lie back to back (Note [Buckets in
  // place]), else nullopt.
  std::vector<std::optional<DLTensor>> in_place_;
  bool host_memory_;
  GradientCompression compression_;
  GradientScaling scaling_;
  void* stream_;
  std::vector<size_t> bucket_of_parameter_;
  std::vector<int64_t> span_shapes_;  // shape storage of in_place_
  std::vector<float> flat_;
  std::vector<uint16_t> flat16_;

  std::mutex mutex_;
  bool active_ = false;
  float scale_ = 1.0f;
  std::vector<size_t> pending_;  // per bucket: gradients not yet ready
  std::vector<bool> parameter_ready_;
  size_t next_to_launch_ = 0;
  std::vector<std::future<Status>> launched_;
};

}  // namespace dpl::training
