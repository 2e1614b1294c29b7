#include "training/collectives/backend_collectives.hpp"

#include "dpl/support/half.hpp"
#include "training/host_tensor.hpp"

namespace dpl::training {

bool BackendCollectives::Reaches(const DLDevice& device) const {
  if (InHostMemory(device)) return backend_.device_type() == kDLCPU;
  return backend_.device_type() == device.device_type;
}

Status BackendCollectives::SumScalars(const std::string& /*name*/, std::vector<double>* values) {
  int64_t shape[1] = {int64_t(values->size())};
  DLTensor tensor = HostTensor(values->data(), DLDataType{kDLFloat, 64, 1}, 1, shape);
  return thread_.Run([&] { return backend_.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr); },
                     {"allreduce", -1, 0, values->size() * sizeof(double)});
}

Result<std::vector<uint64_t>> BackendCollectives::GatherWords(const std::vector<uint64_t>& mine,
                                                              const std::string& /*name*/) {
  std::vector<uint64_t> own = mine;
  std::vector<uint64_t> all(mine.size() * size_t(size_));
  int64_t count = int64_t(own.size()), total = int64_t(all.size());
  const DLTensor input = HostTensor(own.data(), DLDataType{kDLInt, 64, 1}, 1, &count);
  DLTensor output = HostTensor(all.data(), DLDataType{kDLInt, 64, 1}, 1, &total);
  DPL_RETURN_IF_ERROR(thread_.Run([&] { return backend_.Allgather(&input, &output, nullptr); },
                                  {"allgather", -1, 0, uint64_t(total) * sizeof(uint64_t)}));
  return all;
}

Result<bool> BackendCollectives::AnyRankSays(const std::string& /*name*/, int64_t /*step*/,
                                             bool yes) {
  float votes = yes ? 1.0f : 0.0f;
  int64_t shape[1] = {1};
  DLTensor tensor = HostTensor(&votes, DLDataType{kDLFloat, 32, 1}, 1, shape);
  DPL_RETURN_IF_ERROR(
      thread_.Run([&] { return backend_.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr); },
                  {"vote", -1, 0, sizeof votes}));
  return votes > 0.0f;
}

Status BackendCollectives::Barrier(const std::string& /*what*/) {
  return thread_.Run([this] { return backend_.Barrier(); }, {"barrier", -1, 0, 0});
}

Status BackendCollectives::BroadcastTensors(const std::vector<DLTensor>& tensors, int root,
                                            void* stream,
                                            const observability::CollectiveActivity& activity) {
  return thread_.Run(
      [&] {
        for (const DLTensor& tensor : tensors) {
          DLTensor sent = tensor;
          DPL_RETURN_IF_ERROR(backend_.Broadcast(&sent, root, stream));
        }
        return backend_.Synchronize(stream);
      },
      activity);
}

Result<std::unique_ptr<GradientReduction>> BackendCollectives::ReduceGradients(ReductionPlan plan) {
  if (plan.sharded) return ReduceScatterBuckets(backend_, thread_, rank_, size_, std::move(plan));
  return AllreduceBuckets(backend_, thread_, std::move(plan));
}

// The signal first, so that nothing queued starts, then the instance, so that a call blocked in
// the plugin returns (Backend::Abort: a no-op for a plugin without abort).
void BackendCollectives::Abort(const Status& why) {
  thread_.Abort(why);
  backend_.Abort();
}

Status AllreduceIn16Bits(Backend& backend, WireFormat wire, float* data, size_t count, float scale,
                         std::vector<uint16_t>* rounded) {
  const bool half = wire == WireFormat::kFp16;
  if (rounded->size() < count) rounded->resize(count);
  uint16_t* bits = rounded->data();
  if (half) {
    for (size_t i = 0; i < count; ++i) bits[i] = support::FloatToHalf(data[i] * scale);
  } else {
    for (size_t i = 0; i < count; ++i) bits[i] = support::FloatToBfloat16(data[i] * scale);
  }
  int64_t shape[1] = {int64_t(count)};
  DLTensor tensor =
      HostTensor(bits, DLDataType{uint8_t(half ? kDLFloat : kDLBfloat), 16, 1}, 1, shape);
  DPL_RETURN_IF_ERROR(backend.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr));
  if (half) {
    for (size_t i = 0; i < count; ++i) data[i] = support::HalfToFloat(bits[i]);
  } else {
    for (size_t i = 0; i < count; ++i) data[i] = support::Bfloat16ToFloat(bits[i]);
  }
  return Status::Ok();
}

Status SumHostFloats(Backend& backend, WireFormat wire, float* data, size_t count, float scale,
                     std::vector<uint16_t>* rounded) {
  if (wire != WireFormat::kNone) {
    return AllreduceIn16Bits(backend, wire, data, count, scale, rounded);
  }
  int64_t shape[1] = {int64_t(count)};
  DLTensor tensor = HostTensor(data, DLDataType{kDLFloat, 32, 1}, 1, shape);
  DPL_RETURN_IF_ERROR(backend.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr));
  if (scale != 1.0f) {
    for (size_t i = 0; i < count; ++i) data[i] *= scale;
  }
  return Status::Ok();
}

}  // namespace dpl::training
