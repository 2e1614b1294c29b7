// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the batches the host
// hands to train_step and eval_step, and the host memory it fills them in (host_batch_slot).
#ifndef DPL_TORCH_MODEL_HOST_BATCHES_HPP
#define DPL_TORCH_MODEL_HOST_BATCHES_HPP

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/tensor_view.hpp"

namespace dpl {
namespace torch_model {
namespace {

// One of the DPL_MODEL_HOST_BATCH_SLOTS host buffers (page-locked for a CUDA model).
struct HostSlot {
  torch::Tensor input, labels;
  TensorView input_view, labels_view;
};

class HostBatches {
 public:
  HostBatches(c10::Device device, std::vector<int64_t> input_shape)
      : device_(device), input_shape_(std::move(input_shape)) {}

  // host_batch_slot: the slot's buffers for `capacity` samples (new ones when it changes).
  void Slot(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* labels) {
    RequireNotNull(input, "input");
    RequireNotNull(labels, "labels");
    if (slot >= DPL_MODEL_HOST_BATCH_SLOTS) {
      throw InvalidArgument("host batch slot " + std::to_string(slot) +
                            " does not exist; the slots are 0 to " +
                            std::to_string(DPL_MODEL_HOST_BATCH_SLOTS - 1));
    }
    if (capacity < 1) {
      throw InvalidArgument("host_batch capacity must be >= 1, got " + std::to_string(capacity));
    }
    std::lock_guard<std::mutex> lock(slots_mutex_);
    HostSlot& host = slots_[slot];
    if (!host.input.defined() || host.input.size(0) != capacity) {
      // Page-locked memory exists only with CUDA; a CPU model's batches need no copy at all.
      const bool page_locked = device_.is_cuda();
      const auto options = torch::TensorOptions().pinned_memory(page_locked);
      std::vector<int64_t> input_sizes{capacity};
      input_sizes.insert(input_sizes.end(), input_shape_.begin(), input_shape_.end());
      host.input = torch::empty(input_sizes, options.dtype(torch::kFloat32));
      host.labels = torch::empty({capacity}, options.dtype(torch::kInt64));
      host.input_view.Bind(host.input, page_locked);
      host.labels_view.Bind(host.labels, page_locked);
    }
    *input = host.input_view.tensor;
    *labels = host.labels_view.tensor;
  }

  // Wraps the host's batch without copying, after checking it matches the model.
  std::pair<torch::Tensor, torch::Tensor> Wrap(const DLTensor* input,
                                               const DLTensor* labels) const {
    RequireNotNull(input, "input");
    RequireNotNull(labels, "labels");
    const auto expected_ndim = static_cast<int32_t>(input_shape_.size() + 1);
    bool input_ok = input->dtype.code == kDLFloat && input->dtype.bits == 32 &&
                    input->dtype.lanes == 1 && input->ndim == expected_ndim &&
                    input->shape != nullptr && input->shape[0] >= 1;
    for (int32_t i = 1; input_ok && i < expected_ndim; ++i) {
      input_ok = input->shape[i] == input_shape_[size_t(i - 1)];
    }
    if (!input_ok) {
      std::string wanted = "(batch";
      for (auto extent : input_shape_) wanted += ", " + std::to_string(extent);
      throw InvalidArgument(
          "input must be a float32 tensor of shape " + wanted + ") with batch >= 1; got " +
          (input->shape ? ShapeText(input->shape, input->ndim) : "no shape") + " of dtype code " +
          std::to_string(input->dtype.code) + " bits " + std::to_string(input->dtype.bits));
    }
    const int64_t batch = input->shape[0];
    if (labels->dtype.code != kDLInt || labels->dtype.bits != 64 || labels->dtype.lanes != 1 ||
        labels->ndim != 1 || labels->shape == nullptr || labels->shape[0] != batch) {
      throw InvalidArgument("labels must be an int64 tensor of shape (" + std::to_string(batch) +
                            "); got " +
                            (labels->shape ? ShapeText(labels->shape, labels->ndim) : "no shape") +
                            " of dtype code " + std::to_string(labels->dtype.code) + " bits " +
                            std::to_string(labels->dtype.bits));
    }
    for (const DLTensor* tensor : {input, labels}) {
      if (tensor->strides != nullptr) {
        int64_t compact = 1;
        for (int32_t i = tensor->ndim - 1; i >= 0; --i) {
          if (tensor->shape[i] != 1 && tensor->strides[i] != compact) {
            throw InvalidArgument("input and labels must be compact row-major tensors");
          }
          compact *= tensor->shape[i];
        }
      }
      if (!OnModelDevice(tensor->device) && !InHostMemory(tensor->device)) {
        throw InvalidArgument("input and labels must live on the model's device " + device_.str() +
                              " or in host memory");
      }
      RequireNotNull(tensor->data, "batch data");
    }
    std::vector<int64_t> input_sizes(input->shape, input->shape + input->ndim);
    return {OnDevice(*input, input_sizes, torch::kFloat32),
            OnDevice(*labels, {batch}, torch::kInt64)};
  }

 private:
  bool OnModelDevice(const DLDevice& device) const {
    return device_.is_cuda() ? device.device_type == kDLCUDA && device.device_id == device_.index()
                             : device.device_type == kDLCPU;
  }

  static bool InHostMemory(const DLDevice& device) {
    return device.device_type == kDLCPU || device.device_type == kDLCUDAHost;
  }

  // The host slot tensor whose memory starts at `data`, if any.
  torch::Tensor SlotTensorAt(const void* data) const {
    std::lock_guard<std::mutex> lock(slots_mutex_);
    for (const HostSlot& slot : slots_) {
      if (slot.input.defined() && data == slot.input.data_ptr()) return slot.input;
      if (slot.labels.defined() && data == slot.labels.data_ptr()) return slot.labels;
    }
    return {};
  }

  // The batch tensor on the model's device. Host memory is copied there (asynchronously when it
  // is a page-locked buffer of host_batch_slot; the copy is ordered before the model's kernels on
  // the same stream, and train_step/eval_step read the loss back before returning, so the host
  // may refill the buffer once they return).
  torch::Tensor OnDevice(const DLTensor& tensor, c10::IntArrayRef sizes,
                         torch::ScalarType type) const {
    void* data = static_cast<char*>(tensor.data) + tensor.byte_offset;
    if (OnModelDevice(tensor.device)) {
      return torch::from_blob(data, sizes, torch::TensorOptions().device(device_).dtype(type));
    }
    const torch::Tensor slot = device_.is_cuda() ? SlotTensorAt(data) : torch::Tensor();
    torch::Tensor host = slot.defined()
                             ? slot.narrow(0, 0, sizes[0]).view(sizes)  // keeps the pinned view
                             : torch::from_blob(data, sizes, torch::TensorOptions().dtype(type));
    if (!device_.is_cuda()) return host;
    return host.to(device_, type, /*non_blocking=*/true);
  }

  c10::Device device_;
  std::vector<int64_t> input_shape_;  // one sample
  // host_batch_slot may run on the host's loader thread while a step runs on another slot.
  mutable std::mutex slots_mutex_;
  std::array<HostSlot, DPL_MODEL_HOST_BATCH_SLOTS> slots_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_HOST_BATCHES_HPP
