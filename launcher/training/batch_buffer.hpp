// The host memory one batch is gathered into before train_step or eval_step: the model's own
// (host_batch: page-locked for a GPU model, so its copy to the device is asynchronous) or, where
// the model has none for that slot (Model::host_batch_slots), memory of this object. A batch is
// typed as the data and the model agreed: (n, input.shape...) of input's dtype and
// (n, target.shape...) of target's (float32 images and int64 labels, int64 token ids and the next
// tokens, ...).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.hpp"
#include "dpl/dataset.h"
#include "dpl/model.h"
#include "training/model.hpp"

namespace dpl::training {

class BatchBuffer {
 public:
  // Room for `capacity` samples of `input` and their `target`s (one sample's dtype and shape
  // each), in `model`'s host batch slot `slot`. Valid until the next Allocate of the same slot.
  Status Allocate(Model& model, uint32_t slot, int64_t capacity, const dpl_sample_tensor& input,
                  const dpl_sample_tensor& target);

  // The first `n` samples and targets as tensors (the shapes live in this object until the next
  // call).
  const DLTensor& Input(int64_t n);
  const DLTensor& Target(int64_t n);

 private:
  // One of the two tensors: the whole buffer, the view of its first n samples, and its memory
  // when this object owns it.
  struct Part {
    DLTensor whole{};
    DLTensor view{};
    int64_t view_shape[DPL_DATASET_MAX_SAMPLE_DIMS + 1] = {};
    std::vector<int64_t> own_shape;
    std::vector<uint64_t> own_memory;  // 8-byte aligned for every dtype

    void Own(int64_t capacity, const dpl_sample_tensor& sample);
    const DLTensor& First(int64_t n);
  };

  Part input_, target_;
};

// "int64 (4, 32)": a tensor's dtype and shape, for messages.
std::string BatchText(const DLTensor& tensor);

}  // namespace dpl::training
