#include "training/buffers.hpp"

#include <fstream>

#include "training/host_tensor.hpp"

namespace dpl::training {

using torch_files::TorchDtype;

Result<std::vector<BufferInfo>> ListBuffers(const Model& model) {
  std::vector<BufferInfo> buffers;
  if (!model.Has(ModelCapability::kBuffers)) return buffers;
  for (uint32_t i = 0; i < model.info().buffer_count; ++i) {
    dpl_buffer buffer{};
    DPL_RETURN_IF_ERROR(model.Buffer(i, &buffer));
    BufferInfo info;
    info.name = buffer.name ? buffer.name : "";
    info.value = buffer.value;
    info.shape.assign(buffer.value.shape, buffer.value.shape + buffer.value.ndim);
    info.bytes = ElementCount(buffer.value) * ((buffer.value.dtype.bits + 7) / 8);
    buffers.push_back(std::move(info));
  }
  return buffers;
}

Result<TorchDtype> TorchDtypeOfDl(const DLDataType& dtype, const std::string& what) {
  if (dtype.lanes == 1) {
    if (dtype.code == kDLFloat && dtype.bits == 32) return TorchDtype::kFloat32;
    if (dtype.code == kDLFloat && dtype.bits == 64) return TorchDtype::kFloat64;
    if (dtype.code == kDLFloat && dtype.bits == 16) return TorchDtype::kFloat16;
    if (dtype.code == kDLBfloat && dtype.bits == 16) return TorchDtype::kBFloat16;
    if (dtype.code == kDLInt && dtype.bits == 64) return TorchDtype::kInt64;
    if (dtype.code == kDLInt && dtype.bits == 32) return TorchDtype::kInt32;
    if (dtype.code == kDLInt && dtype.bits == 16) return TorchDtype::kInt16;
    if (dtype.code == kDLInt && dtype.bits == 8) return TorchDtype::kInt8;
    if (dtype.code == kDLUInt && dtype.bits == 8) return TorchDtype::kUInt8;
  }
  return Status::Error(DPL_ERR_UNSUPPORTED,
                       what + " has a DLPack dtype (code " + std::to_string(dtype.code) + ", " +
                           std::to_string(dtype.bits) + " bits) no torch file can hold");
}

Status WriteBufferBytes(Model& model, const std::string& path) {
  DPL_ASSIGN_OR_RETURN(std::vector<BufferInfo> buffers, ListBuffers(model));
  size_t total = 0;
  for (const BufferInfo& buffer : buffers) total += buffer.bytes;
  if (total == 0) return Status::Ok();
  std::vector<uint8_t> bytes(total);
  DPL_RETURN_IF_ERROR(model.ReadBuffers(bytes.data(), bytes.size()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  out.close();
  if (!out) return Status::Io("cannot write " + path);
  return Status::Ok();
}

}  // namespace dpl::training
