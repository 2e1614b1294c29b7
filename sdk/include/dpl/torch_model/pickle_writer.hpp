// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): writes a state dict
// {name: tensor} as Python's torch.save does.
//
// Note [Writing torch.save files]: the file is torch.save's zip archive (data.pkl, data/<key>
// per tensor, version) with a protocol-2 pickle of a plain dict whose tensors are
// torch._utils._rebuild_tensor_v2 over torch.<Type>Storage persistent ids, as torch.save writes
// them. torch::pickle_save would write the same archive but wraps the dict in
// torch.jit._pickle.restore_type_tag, a global that torch.load(path, weights_only=True) refuses
// (the default from PyTorch 2.6 on); every global here is on weights_only's allow-list.
#ifndef DPL_TORCH_MODEL_PICKLE_WRITER_HPP
#define DPL_TORCH_MODEL_PICKLE_WRITER_HPP

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

// The torch.<Type>Storage of an element type.
inline const char* StorageClass(c10::ScalarType type) {
  static const std::map<c10::ScalarType, const char*> names = {
      {c10::kFloat, "FloatStorage"}, {c10::kDouble, "DoubleStorage"},
      {c10::kHalf, "HalfStorage"},   {c10::kBFloat16, "BFloat16Storage"},
      {c10::kLong, "LongStorage"},   {c10::kInt, "IntStorage"},
      {c10::kShort, "ShortStorage"}, {c10::kChar, "CharStorage"},
      {c10::kByte, "ByteStorage"},   {c10::kBool, "BoolStorage"}};
  const auto found = names.find(type);
  if (found == names.end()) {
    throw PluginError(DPL_ERR_UNSUPPORTED,
                      std::string("a state dict cannot hold a tensor of ") + c10::toString(type));
  }
  return found->second;
}

class StateDictPickle {
 public:
  // The pickle of {name: tensor} over storages data/0, data/1, ... in the order given.
  explicit StateDictPickle(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
    Op(0x80);  // PROTO 2
    Op(2);
    Op('}');  // EMPTY_DICT
    Op('(');  // MARK
    for (size_t key = 0; key < tensors.size(); ++key) {
      const torch::Tensor& tensor = tensors[key].second;
      Unicode(tensors[key].first);
      Global("torch._utils", "_rebuild_tensor_v2");
      Op('(');
      Op('(');  // the persistent id ('storage', type, key, location, numel)
      Unicode("storage");
      Global("torch", StorageClass(tensor.scalar_type()));
      Unicode(std::to_string(key));
      Unicode("cpu");
      Int(tensor.numel());
      Op('t');  // TUPLE
      Op('Q');  // BINPERSID
      Int(0);   // storage offset
      Ints(tensor.sizes());
      Ints(tensor.strides());
      Op(0x89);                              // NEWFALSE: requires_grad
      Global("collections", "OrderedDict");  // backward hooks: none
      Op(')');
      Op('R');
      Op('t');
      Op('R');  // REDUCE: _rebuild_tensor_v2(...)
    }
    Op('u');  // SETITEMS
    Op('.');  // STOP
  }

  const std::string& bytes() const { return bytes_; }

 private:
  void Op(uint8_t opcode) { bytes_.push_back(static_cast<char>(opcode)); }
  void Little(uint64_t value, int count) {
    for (int i = 0; i < count; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }
  void Int(int64_t value) {
    if (value >= std::numeric_limits<int32_t>::min() &&
        value <= std::numeric_limits<int32_t>::max()) {
      Op('J');  // BININT
      Little(static_cast<uint64_t>(value), 4);
    } else {
      Op(0x8a);  // LONG1, 8 bytes
      Op(8);
      Little(static_cast<uint64_t>(value), 8);
    }
  }
  void Ints(c10::IntArrayRef values) {
    Op('(');
    for (int64_t value : values) Int(value);
    Op('t');
  }
  void Unicode(const std::string& text) {
    Op('X');  // BINUNICODE
    Little(text.size(), 4);
    bytes_ += text;
  }
  void Global(const std::string& module, const std::string& name) {
    Op('c');
    bytes_ += module + "\n" + name + "\n";
  }

  std::string bytes_;
};

// Writes `tensors` (compact CPU tensors) to `path` as torch.save would.
inline void WriteTorchSaveStateDict(
    const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) {
    throw PluginError(DPL_ERR_IO, "cannot write state file " + path + ": " + std::strerror(errno));
  }
  try {
    caffe2::serialize::PyTorchStreamWriter archive([&](const void* data, size_t size) -> size_t {
      file.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      return file ? size : 0;
    });
    const StateDictPickle pickle(tensors);
    archive.writeRecord("data.pkl", pickle.bytes().data(), pickle.bytes().size());
    for (size_t key = 0; key < tensors.size(); ++key) {
      const torch::Tensor& tensor = tensors[key].second;
      archive.writeRecord("data/" + std::to_string(key), tensor.data_ptr(), tensor.nbytes());
    }
    archive.writeEndOfFile();
  } catch (const c10::Error& error) {
    throw PluginError(DPL_ERR_IO,
                      "cannot write state file " + path + ": " + error.what_without_backtrace());
  }
  file.close();
  if (!file) {
    throw PluginError(DPL_ERR_IO, "cannot write state file " + path + ": " + std::strerror(errno));
  }
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_PICKLE_WRITER_HPP
