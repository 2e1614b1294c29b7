#include "training/batch_buffer.hpp"

#include <algorithm>

#include "training/host_tensor.hpp"

namespace dpl::training {

Status BatchBuffer::Allocate(Model& model, uint32_t slot, int64_t capacity,
                             const std::vector<int64_t>& sample_shape) {
  // The model's own memory where it has it for this slot (page-locked for a GPU model).
  if (slot < model.host_batch_slots()) {
    return model.HostBatch(slot, capacity, &input_, &labels_);
  }
  int64_t sample = 1;
  for (int64_t extent : sample_shape) sample *= extent;
  own_input_.assign(size_t(capacity * sample), 0.0f);
  own_labels_.assign(size_t(capacity), 0);
  own_input_shape_.assign(1, capacity);
  own_input_shape_.insert(own_input_shape_.end(), sample_shape.begin(), sample_shape.end());
  own_label_shape_.assign(1, capacity);
  input_ = HostTensor(own_input_.data(), DLDataType{kDLFloat, 32, 1},
                      int32_t(own_input_shape_.size()), own_input_shape_.data());
  labels_ = HostTensor(own_labels_.data(), DLDataType{kDLInt, 64, 1}, 1, own_label_shape_.data());
  return Status::Ok();
}

float* BatchBuffer::input_data() const {
  return HostData<float>(input_);
}

int64_t* BatchBuffer::label_data() const {
  return HostData<int64_t>(labels_);
}

const DLTensor& BatchBuffer::Input(int64_t n) {
  input_view_ = input_;
  std::copy(input_.shape, input_.shape + input_.ndim, input_shape_);
  input_shape_[0] = n;
  input_view_.shape = input_shape_;
  return input_view_;
}

const DLTensor& BatchBuffer::Labels(int64_t n) {
  labels_view_ = labels_;
  label_shape_[0] = n;
  labels_view_.shape = label_shape_;
  return labels_view_;
}

}  // namespace dpl::training
