// Gradient buckets: the parameters whose gradients one collective reduces (after DDP's reducer).
//
// Note [Bucket order]: buckets are formed over the parameters in REVERSE order (autograd
// produces the last layer's gradients first). As in DDP's reducer, a bucket is closed as soon as
// it holds at least its cap: the FIRST bucket's cap is kFirstBucketCapBytes (1 MiB), every later
// one's bucket_cap_bytes. The small first bucket is what lets communication start early in the
// backward pass; with one 25 MiB bucket a small model (ConvNet: 1.2 MB) would wait for its whole
// backward before sending anything. A bucket is launched once all its gradients are ready,
// but buckets are always launched in bucket-index order, so every rank issues the same sequence
// of collectives even if its gradients become ready in a different order
// (training/gradient_sync.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

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

// Whether a reduction finishes the average itself, or leaves the summed gradients for the caller
// to scale (device memory the host cannot touch).
enum class GradientScaling { kInBucket, kByCaller };

}  // namespace dpl::training
