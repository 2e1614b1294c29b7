// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the batches the host
// hands to train_step and eval_step, typed as the data the model was built for, and the host
// memory it fills them in (host_batch_slot).
#ifndef DPL_TORCH_MODEL_HOST_BATCHES_HPP
#define DPL_TORCH_MODEL_HOST_BATCHES_HPP

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "dpl/model.h"
#include "dpl/support/tensor.hpp"
#include "dpl/torch_model/data.hpp"
#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/tensor_view.hpp"

namespace dpl {
namespace torch_model {
namespace {

// One of the DPL_MODEL_HOST_BATCH_SLOTS host buffers (page-locked for a CUDA model).
struct HostSlot {
  torch::Tensor input, target;
  TensorView input_view, target_view;
};

// "a float32", "an int64": a dtype's name with its article, for messages.
inline std::string DtypeWithArticle(const DLDataType& dtype) {
  const std::string name = support::DtypeName(dtype);
  return (name[0] == 'i' ? "an " : "a ") + name;
}

class HostBatches {
 public:
  // Batches of `data`'s input and target dtypes and shapes.
  HostBatches(c10::Device device, DataShape data) : device_(device), data_(std::move(data)) {}

  // host_batch_slot: the slot's buffers for `capacity` samples (new ones when it changes).
  void Slot(uint32_t slot, int64_t capacity, DLTensor* input, DLTensor* target) {
    RequireNotNull(input, "input");
    RequireNotNull(target, "labels");
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
      host.input = torch::empty(BatchSizes(capacity, data_.input_shape),
                                options.dtype(ScalarTypeOf(data_.input_dtype)));
      host.target = torch::empty(BatchSizes(capacity, data_.target_shape),
                                 options.dtype(ScalarTypeOf(data_.target_dtype)));
      host.input_view.Bind(host.input, page_locked);
      host.target_view.Bind(host.target, page_locked);
    }
    *input = host.input_view.tensor;
    *target = host.target_view.tensor;
  }

  // Wraps the host's batch without copying, after checking it matches the model: the input (of
  // its dtype; integer ids as int64) and the integer target as int64.
  std::pair<torch::Tensor, torch::Tensor> Wrap(const DLTensor* input,
                                               const DLTensor* target) const {
    RequireNotNull(input, "input");
    RequireNotNull(target, "labels");
    if (!Fits(*input, data_.input_dtype, data_.input_shape, -1)) {
      throw InvalidArgument("input must be " + DtypeWithArticle(data_.input_dtype) +
                            " tensor of shape " + BatchText("batch", data_.input_shape) +
                            " with batch >= 1; got " + GotText(*input));
    }
    const int64_t batch = input->shape[0];
    if (!Fits(*target, data_.target_dtype, data_.target_shape, batch)) {
      throw InvalidArgument(
          std::string(data_.target_shape.empty() ? "labels" : "target") + " must be " +
          DtypeWithArticle(data_.target_dtype) + " tensor of shape " +
          BatchText(std::to_string(batch), data_.target_shape) + "; got " + GotText(*target));
    }
    for (const DLTensor* tensor : {input, target}) {
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
    torch::Tensor inputs = OnDevice(*input, ScalarTypeOf(input->dtype));
    torch::Tensor targets = OnDevice(*target, ScalarTypeOf(target->dtype));
    if (IsIntegerType(input->dtype)) inputs = inputs.to(torch::kInt64);
    return {inputs, targets.to(torch::kInt64)};
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
      if (slot.target.defined() && data == slot.target.data_ptr()) return slot.target;
    }
    return {};
  }

  // The batch tensor on the model's device. Host memory is copied there (asynchronously when it
  // is a page-locked buffer of host_batch_slot; the copy is ordered before the model's kernels on
  // the same stream, and train_step/eval_step read the loss back before returning, so the host
  // may refill the buffer once they return).
  torch::Tensor OnDevice(const DLTensor& tensor, torch::ScalarType type) const {
    void* data = static_cast<char*>(tensor.data) + tensor.byte_offset;
    const std::vector<int64_t> sizes(tensor.shape, tensor.shape + tensor.ndim);
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

  // (batch, shape...) of one sample's `shape`.
  static std::vector<int64_t> BatchSizes(int64_t batch, const std::vector<int64_t>& shape) {
    std::vector<int64_t> sizes{batch};
    sizes.insert(sizes.end(), shape.begin(), shape.end());
    return sizes;
  }

  // "(batch, 1, 28, 28)".
  static std::string BatchText(const std::string& batch, const std::vector<int64_t>& shape) {
    std::string text = "(" + batch;
    for (int64_t extent : shape) text += ", " + std::to_string(extent);
    return text + ")";
  }

  static std::string GotText(const DLTensor& tensor) {
    return (tensor.shape ? ShapeText(tensor.shape, tensor.ndim) : std::string("no shape")) +
           " of dtype code " + std::to_string(tensor.dtype.code) + " bits " +
           std::to_string(tensor.dtype.bits);
  }

  // Whether `tensor` is a batch of `dtype` and (batch, shape...): batch >= 1, and `batch` itself
  // unless it is -1.
  static bool Fits(const DLTensor& tensor, const DLDataType& dtype,
                   const std::vector<int64_t>& shape, int64_t batch) {
    if (tensor.dtype.code != dtype.code || tensor.dtype.bits != dtype.bits ||
        tensor.dtype.lanes != 1 || tensor.ndim != static_cast<int32_t>(shape.size() + 1) ||
        tensor.shape == nullptr || tensor.shape[0] < 1 ||
        (batch >= 0 && tensor.shape[0] != batch)) {
      return false;
    }
    return std::equal(shape.begin(), shape.end(), tensor.shape + 1);
  }

  c10::Device device_;
  DataShape data_;  // one sample's input and target
  // host_batch_slot may run on the host's loader thread while a step runs on another slot.
  mutable std::mutex slots_mutex_;
  std::array<HostSlot, DPL_MODEL_HOST_BATCH_SLOTS> slots_;
};

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_HOST_BATCHES_HPP
