#include "training/batch_buffer.hpp"

#include <algorithm>

#include "dpl/support/tensor.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {
namespace {

std::vector<int64_t> BatchShape(int64_t capacity, const dpl_sample_tensor& sample) {
  std::vector<int64_t> shape{capacity};
  shape.insert(shape.end(), sample.shape,
               sample.shape + std::min<uint32_t>(sample.ndim, DPL_DATASET_MAX_SAMPLE_DIMS));
  return shape;
}

bool SameDtype(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Ok when the model's host batch `tensor` holds `capacity` samples of `sample`.
Status CheckModelBatch(const Model& model, const char* what, const DLTensor& tensor,
                       int64_t capacity, const dpl_sample_tensor& sample) {
  const std::vector<int64_t> wanted = BatchShape(capacity, sample);
  const bool fits = SameDtype(tensor.dtype, sample.dtype) && tensor.data != nullptr &&
                    tensor.ndim == int32_t(wanted.size()) && tensor.shape != nullptr &&
                    std::equal(wanted.begin(), wanted.end(), tensor.shape);
  if (fits) return Status::Ok();
  DLTensor expected{};
  expected.dtype = sample.dtype;
  expected.ndim = int32_t(wanted.size());
  expected.shape = const_cast<int64_t*>(wanted.data());
  return Status::Error(DPL_ERR_INTERNAL, "model '" + model.name() + "' hands out a host batch " +
                                             what + " of " + BatchText(tensor) + " where " +
                                             BatchText(expected) +
                                             " was asked for; fix the plugin's host_batch");
}

}  // namespace

std::string BatchText(const DLTensor& tensor) {
  std::string text = support::DtypeName(tensor.dtype) + " (";
  for (int32_t d = 0; d < tensor.ndim && tensor.shape != nullptr; ++d) {
    text += (d == 0 ? "" : ", ") + std::to_string(tensor.shape[d]);
  }
  return text + ")";
}

void BatchBuffer::Part::Own(int64_t capacity, const dpl_sample_tensor& sample) {
  own_shape = BatchShape(capacity, sample);
  int64_t elements = 1;
  for (int64_t extent : own_shape) elements *= extent;
  const size_t bytes = size_t(elements) * support::ElementSize(sample.dtype);
  own_memory.assign((bytes + sizeof(uint64_t) - 1) / sizeof(uint64_t), 0);
  whole = HostTensor(own_memory.data(), sample.dtype, int32_t(own_shape.size()), own_shape.data());
}

const DLTensor& BatchBuffer::Part::First(int64_t n) {
  view = whole;
  std::copy(whole.shape, whole.shape + whole.ndim, view_shape);
  view_shape[0] = n;
  view.shape = view_shape;
  return view;
}

Status BatchBuffer::Allocate(Model& model, uint32_t slot, int64_t capacity,
                             const dpl_sample_tensor& input, const dpl_sample_tensor& target) {
  // The model's own memory where it has it for this slot (page-locked for a GPU model).
  if (slot < model.host_batch_slots()) {
    DPL_RETURN_IF_ERROR(model.HostBatch(slot, capacity, &input_.whole, &target_.whole));
    DPL_RETURN_IF_ERROR(CheckModelBatch(model, "input", input_.whole, capacity, input));
    return CheckModelBatch(model, "target", target_.whole, capacity, target);
  }
  input_.Own(capacity, input);
  target_.Own(capacity, target);
  return Status::Ok();
}

const DLTensor& BatchBuffer::Input(int64_t n) {
  return input_.First(n);
}

const DLTensor& BatchBuffer::Target(int64_t n) {
  return target_.First(n);
}

}  // namespace dpl::training
