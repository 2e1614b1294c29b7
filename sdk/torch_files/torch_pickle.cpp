// Pickling a TorchValue the way torch.save does (protocol 2). The unpickler is
// torch_unpickler.cpp.
#include <cstring>
#include <map>

#include "dpl/torch_files/torch_pickle.hpp"
#include "pickle_opcodes.hpp"

namespace dpl::torch_files {

const char* TorchStorageTypeName(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat32:
      return "FloatStorage";
    case TorchDtype::kFloat64:
      return "DoubleStorage";
    case TorchDtype::kFloat16:
      return "HalfStorage";
    case TorchDtype::kBFloat16:
      return "BFloat16Storage";
    case TorchDtype::kInt64:
      return "LongStorage";
    case TorchDtype::kInt32:
      return "IntStorage";
    case TorchDtype::kInt16:
      return "ShortStorage";
    case TorchDtype::kInt8:
      return "CharStorage";
    case TorchDtype::kUInt8:
      return "ByteStorage";
    case TorchDtype::kBool:
      return "BoolStorage";
  }
  return "FloatStorage";
}

bool IsPickleUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const uint8_t lead = *p;
    size_t length;
    uint32_t minimum;
    if (lead < 0x80) {
      ++p;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, minimum = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, minimum = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, minimum = 0x10000;
    } else {
      return false;
    }
    if (size_t(end - p) < length) return false;
    uint32_t code = lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      code = (code << 6) | (p[i] & 0x3F);
    }
    if (code < minimum || code > 0x10FFFF) return false;  // overlong or beyond Unicode
    p += length;
  }
  return true;
}

namespace {

class Pickler {
 public:
  Status Pickle(const TorchValue& root) {
    Op(pickle::kProto);
    Byte(2);
    DPL_RETURN_IF_ERROR(Value(root, "root", 0));
    Op(pickle::kStop);
    return Status::Ok();
  }
  TorchPickle Take() { return TorchPickle{std::move(out_), std::move(storages_)}; }

 private:
  void Byte(uint8_t v) { out_.push_back(char(v)); }
  void Op(pickle::Opcode op) { Byte(op); }
  void Little(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) Byte(uint8_t(v >> (8 * i)));
  }

  void Int(int64_t v) {
    if (v >= 0 && v < 0x100) {
      Op(pickle::kBinInt1);
      Byte(uint8_t(v));
    } else if (v >= 0 && v < 0x10000) {
      Op(pickle::kBinInt2);
      Little(uint64_t(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      Op(pickle::kBinInt);
      Little(uint64_t(v), 4);
    } else {
      // Python's encode_long: the fewest little-endian two's-complement bytes that keep the sign.
      int bytes = 8;
      while (bytes > 1) {
        const int64_t top = v >> (8 * (bytes - 1) - 1);  // the top byte and the next bit down
        if (top != 0 && top != -1) break;
        --bytes;
      }
      Op(pickle::kLong1);
      Byte(uint8_t(bytes));
      Little(uint64_t(v), bytes);
    }
  }

  void Text(std::string_view text) {
    Op(pickle::kBinUnicode);
    Little(text.size(), 4);
    out_.append(text.data(), text.size());
  }

  // A global, memoized on first use so that later uses are a BINGET (as Python's pickler does).
  void Global(const std::string& module, const std::string& name) {
    const std::string key = module + "\n" + name + "\n";
    const auto found = globals_.find(key);
    if (found != globals_.end()) {
      if (found->second < 0x100) {
        Op(pickle::kBinGet);
        Byte(uint8_t(found->second));
      } else {
        Op(pickle::kLongBinGet);
        Little(found->second, 4);
      }
      return;
    }
    const uint32_t index = uint32_t(globals_.size());
    globals_.emplace(key, index);
    Op(pickle::kGlobal);
    out_ += key;
    if (index < 0x100) {
      Op(pickle::kBinPut);
      Byte(uint8_t(index));
    } else {
      Op(pickle::kLongBinPut);
      Little(index, 4);
    }
  }

  void IntTuple(const std::vector<int64_t>& values) {
    if (values.empty()) {
      Op(pickle::kEmptyTuple);
      return;
    }
    if (values.size() > 3) Op(pickle::kMark);
    for (int64_t v : values) Int(v);
    static constexpr pickle::Opcode kTupleOf[] = {pickle::kEmptyTuple, pickle::kTuple1,
                                                  pickle::kTuple2, pickle::kTuple3};
    Op(values.size() > 3 ? pickle::kTuple : kTupleOf[values.size()]);
  }

  Status Tensor(const TorchTensor& tensor, const std::string& where) {
    if (!tensor.HasConsistentSize()) {
      std::string shape;
      for (int64_t dim : tensor.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(dim);
      return Status::InvalidArgument(
          "tensor " + where + " has " + std::to_string(tensor.data.size()) + " bytes of data, " +
          "which does not fit its shape [" + shape + "] of " + TorchDtypeName(tensor.dtype) + " (" +
          std::to_string(TorchDtypeSize(tensor.dtype)) + " bytes an element)");
    }
    // Row-major strides, with torch's rule that a 0-size dim counts as 1.
    std::vector<int64_t> strides(tensor.shape.size());
    int64_t stride = 1;
    for (size_t d = tensor.shape.size(); d-- > 0;) {
      strides[d] = stride;
      if (__builtin_mul_overflow(stride, std::max<int64_t>(tensor.shape[d], 1), &stride)) {
        return Status::InvalidArgument("tensor " + where + " has a shape too large to stride");
      }
    }
    const std::string key = std::to_string(storages_.size());
    storages_.push_back(&tensor);
    Global("torch._utils", "_rebuild_tensor_v2");
    Op(pickle::kMark);
    Op(pickle::kMark);
    Text("storage");
    Global("torch", TorchStorageTypeName(tensor.dtype));
    Text(key);
    Text("cpu");
    Int(tensor.NumElements());
    Op(pickle::kTuple);
    Op(pickle::kBinPersId);
    Int(0);  // storage offset
    IntTuple(tensor.shape);
    IntTuple(strides);
    Op(pickle::kNewFalse);                 // requires_grad
    Global("collections", "OrderedDict");  // backward hooks: an empty OrderedDict
    Op(pickle::kEmptyTuple);
    Op(pickle::kReduce);
    Op(pickle::kTuple);
    Op(pickle::kReduce);
    return Status::Ok();
  }

  Status Dict(const TorchDict& dict, const std::string& where, size_t depth) {
    if (dict.python_type() == TorchDict::PythonType::kOrderedDict) {
      Global("collections", "OrderedDict");
      Op(pickle::kEmptyTuple);
      Op(pickle::kReduce);
    } else {
      Op(pickle::kEmptyDict);
    }
    if (dict.empty()) return Status::Ok();
    Op(pickle::kMark);
    for (const TorchDictEntry& entry : dict) {
      if (const auto* text = std::get_if<std::string>(&entry.key)) {
        if (!IsPickleUtf8(*text)) {
          return Status::InvalidArgument("a key of " + where + " is not valid UTF-8");
        }
        Text(*text);
      } else {
        Int(std::get<int64_t>(entry.key));
      }
      DPL_RETURN_IF_ERROR(
          Value(entry.value, where + "[" + TorchDictKeyRepr(entry.key) + "]", depth + 1));
    }
    Op(pickle::kSetItems);
    return Status::Ok();
  }

  Status Value(const TorchValue& value, const std::string& where, size_t depth) {
    if (depth > kMaxTorchValueDepth) {
      return Status::InvalidArgument(where + " is nested deeper than " +
                                     std::to_string(kMaxTorchValueDepth) + " containers");
    }
    switch (value.kind()) {
      case TorchValue::Kind::kNone:
        Op(pickle::kNone);
        return Status::Ok();
      case TorchValue::Kind::kBool:
        Op(*value.AsBool() ? pickle::kNewTrue : pickle::kNewFalse);
        return Status::Ok();
      case TorchValue::Kind::kInt:
        Int(*value.AsInt());
        return Status::Ok();
      case TorchValue::Kind::kFloat: {
        uint64_t bits;
        std::memcpy(&bits, value.AsFloat(), 8);
        Op(pickle::kBinFloat);
        for (int i = 7; i >= 0; --i) Byte(uint8_t(bits >> (8 * i)));
        return Status::Ok();
      }
      case TorchValue::Kind::kString:
        if (!IsPickleUtf8(*value.AsString())) {
          return Status::InvalidArgument("string " + where + " is not valid UTF-8");
        }
        Text(*value.AsString());
        return Status::Ok();
      case TorchValue::Kind::kList:
      case TorchValue::Kind::kTuple:
        return Sequence(value, where, depth);
      case TorchValue::Kind::kDict:
        return Dict(*value.AsDict(), where, depth);
      case TorchValue::Kind::kTensor:
        return Tensor(*value.AsTensor(), where);
    }
    return Status::Ok();
  }

  Status Sequence(const TorchValue& value, const std::string& where, size_t depth) {
    const bool is_list = value.kind() == TorchValue::Kind::kList;
    const TorchValue::Items& items = *value.AsSequence();
    if (is_list) {
      Op(pickle::kEmptyList);
      if (items.empty()) return Status::Ok();
    } else if (items.empty()) {
      Op(pickle::kEmptyTuple);
      return Status::Ok();
    }
    Op(pickle::kMark);
    for (size_t i = 0; i < items.size(); ++i) {
      DPL_RETURN_IF_ERROR(Value(items[i], where + "[" + std::to_string(i) + "]", depth + 1));
    }
    Op(is_list ? pickle::kAppends : pickle::kTuple);
    return Status::Ok();
  }

  std::string out_;
  std::map<std::string, uint32_t> globals_;
  std::vector<const TorchTensor*> storages_;
};

}  // namespace

Result<TorchPickle> PickleTorchValue(const TorchValue& root) {
  Pickler pickler;
  DPL_RETURN_IF_ERROR(pickler.Pickle(root));
  return pickler.Take();
}

}  // namespace dpl::torch_files
