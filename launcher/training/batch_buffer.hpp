// The host memory one batch is gathered into before train_step or eval_step: the model's own
// (host_batch: page-locked for a GPU model, so its copy to the device is asynchronous) or, where
// the model has none for that slot (Model::host_batch_slots), memory of this object.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.hpp"
#include "dpl/model.h"
#include "training/model.hpp"

namespace dpl::training {

class BatchBuffer {
 public:
  // Room for `capacity` samples of `sample_shape` (float32) and their labels (int64), in
  // `model`'s host batch slot `slot`. Valid until the next Allocate of the same slot.
  Status Allocate(Model& model, uint32_t slot, int64_t capacity,
                  const std::vector<int64_t>& sample_shape);

  float* input_data() const;
  int64_t* label_data() const;
  // The first `n` samples and labels as tensors (the shapes live in this object until the next
  // call).
  const DLTensor& Input(int64_t n);
  const DLTensor& Labels(int64_t n);

 private:
  DLTensor input_{}, labels_{};
  DLTensor input_view_{}, labels_view_{};
  int64_t input_shape_[DPL_MODEL_MAX_INPUT_DIMS + 1] = {};
  int64_t label_shape_[1] = {};
  std::vector<float> own_input_;
  std::vector<int64_t> own_labels_;
  std::vector<int64_t> own_input_shape_, own_label_shape_;
};

}  // namespace dpl::training
