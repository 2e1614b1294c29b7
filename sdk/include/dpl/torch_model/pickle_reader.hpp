// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): reads the state dict in
// a file that Python's torch.save wrote.
//
// Note [Reading torch.save files]: torch.save(module.state_dict(), path) writes a zip archive
// whose data.pkl is a Python pickle (protocol 2) of a collections.OrderedDict carrying a
// `_metadata` attribute, with every tensor as torch._utils._rebuild_tensor_v2 over a storage
// that lives in the archive's data/<key> record. libtorch 1.13's own unpickler
// (torch::pickle_load) turns an OrderedDict into None and knows no nn.Parameter
// (_rebuild_parameter), so it cannot read what Python writes most often. This is a small pickle
// machine for exactly these files: the opcodes of protocols 2 to 4 that such a pickle uses, dicts,
// lists, tuples, scalars and strings as values, tensors and parameters rebuilt from their
// storages, any other object kept as an opaque value named by its class (e.g. the _metadata
// state, which is ignored). It executes nothing and imports nothing; every read is bounds-checked.
#ifndef DPL_TORCH_MODEL_PICKLE_READER_HPP
#define DPL_TORCH_MODEL_PICKLE_READER_HPP

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

// One value of the pickle. Containers hold shared references, as Python's do, so an update
// through the memo (SETITEMS on a memoised dict) reaches every holder.
struct PickleValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kOpaque
  };
  Kind kind = Kind::kNone;
  int64_t integer = 0;
  double real = 0;
  std::string text;  // a string's or bytes' content; a global's "module.name"; an opaque's class
  std::vector<std::shared_ptr<PickleValue>> items;  // tuple, list; dict: key, value, key, ...
  torch::Tensor tensor;
};
using PickleRef = std::shared_ptr<PickleValue>;

inline const char* PickleKindName(PickleValue::Kind kind) {
  switch (kind) {
    case PickleValue::Kind::kNone:
      return "None";
    case PickleValue::Kind::kBool:
      return "bool";
    case PickleValue::Kind::kInt:
      return "int";
    case PickleValue::Kind::kFloat:
      return "float";
    case PickleValue::Kind::kString:
      return "str";
    case PickleValue::Kind::kBytes:
      return "bytes";
    case PickleValue::Kind::kTuple:
      return "tuple";
    case PickleValue::Kind::kList:
      return "list";
    case PickleValue::Kind::kDict:
      return "dict";
    case PickleValue::Kind::kGlobal:
      return "class";
    case PickleValue::Kind::kStorage:
      return "storage";
    case PickleValue::Kind::kTensor:
      return "tensor";
    case PickleValue::Kind::kOpaque:
      return "object";
  }
  return "value";
}

// The element type of a torch.<Name>Storage.
inline c10::ScalarType StorageElementType(const std::string& storage_class) {
  static const std::map<std::string, c10::ScalarType> types = {
      {"torch.FloatStorage", c10::kFloat}, {"torch.DoubleStorage", c10::kDouble},
      {"torch.HalfStorage", c10::kHalf},   {"torch.BFloat16Storage", c10::kBFloat16},
      {"torch.LongStorage", c10::kLong},   {"torch.IntStorage", c10::kInt},
      {"torch.ShortStorage", c10::kShort}, {"torch.CharStorage", c10::kChar},
      {"torch.ByteStorage", c10::kByte},   {"torch.BoolStorage", c10::kBool}};
  const auto found = types.find(storage_class);
  if (found == types.end()) {
    throw PluginError(DPL_ERR_UNSUPPORTED, "holds a " + storage_class +
                                               ", which this reader does not know (it reads "
                                               "real, integer and bool tensors)");
  }
  return found->second;
}

// Runs data.pkl of a torch.save archive. Errors are PluginError(DPL_ERR_INVALID_ARGUMENT) with a
// message the caller prefixes with the file.
class TorchSavePickle {
 public:
  explicit TorchSavePickle(caffe2::serialize::PyTorchStreamReader& archive) : archive_(archive) {
    at::DataPtr data;
    std::tie(data, size_) = archive_.getRecord("data.pkl");
    pickle_ = std::move(data);
    bytes_ = static_cast<const uint8_t*>(pickle_.get());
  }

  PickleRef Run() {
    while (true) {
      const uint8_t opcode = Byte();
      if (opcode == kStop) break;
      Step(opcode);
    }
    if (stack_.size() != 1)
      throw Bad("the pickle ends with " + std::to_string(stack_.size()) + " values on its stack");
    return stack_.back();
  }

 private:
  static PluginError Bad(const std::string& what) {
    return InvalidArgument("is not a torch.save file this reader understands: " + what);
  }

  static PickleRef Make(PickleValue::Kind kind) {
    auto value = std::make_shared<PickleValue>();
    value->kind = kind;
    return value;
  }

  const uint8_t* Take(uint64_t count) {
    if (size_ - position_ < count) throw Bad("the pickle is truncated");
    const uint8_t* first = bytes_ + position_;
    position_ += count;
    return first;
  }
  uint8_t Byte() { return *Take(1); }
  template <typename T>
  T Little() {
    T value;
    std::memcpy(&value, Take(sizeof value), sizeof value);  // x86-64 and AArch64: little-endian
    return value;
  }
  std::string Text(uint64_t count) {
    const uint8_t* first = Take(count);
    return std::string(reinterpret_cast<const char*>(first), count);
  }
  std::string Line() {
    std::string line;
    while (true) {
      const char c = static_cast<char>(Byte());
      if (c == '\n') return line;
      line += c;
    }
  }

  PickleRef Pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      throw Bad("a pickle opcode found too few values on the stack");
    }
    PickleRef value = stack_.back();
    stack_.pop_back();
    return value;
  }
  PickleRef& Top() {
    if (stack_.empty()) throw Bad("a pickle opcode found an empty stack");
    return stack_.back();
  }
  // The values above the last MARK, which is removed.
  std::vector<PickleRef> PopToMark() {
    if (marks_.empty()) throw Bad("a pickle opcode found no MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> values(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return values;
  }
  void PushInt(int64_t value) {
    PickleRef result = Make(PickleValue::Kind::kInt);
    result->integer = value;
    stack_.push_back(result);
  }
  void PushString(std::string text, PickleValue::Kind kind = PickleValue::Kind::kString) {
    PickleRef result = Make(kind);
    result->text = std::move(text);
    stack_.push_back(result);
  }
  void PushTuple(std::vector<PickleRef> items) {
    PickleRef result = Make(PickleValue::Kind::kTuple);
    result->items = std::move(items);
    stack_.push_back(result);
  }
  void Memoize(uint64_t index) { memo_[index] = Top(); }
  void Recall(uint64_t index) {
    const auto found = memo_.find(index);
    if (found == memo_.end())
      throw Bad("the pickle recalls memo entry " + std::to_string(index) +
                ", which it never stored");
    stack_.push_back(found->second);
  }
  void AddItems(PickleRef& container, std::vector<PickleRef> items) {
    if (container->kind == PickleValue::Kind::kList) {
      for (auto& item : items) container->items.push_back(std::move(item));
    } else if (container->kind == PickleValue::Kind::kDict) {
      if (items.size() % 2 != 0) throw Bad("a dict update has a key without a value");
      for (auto& item : items) container->items.push_back(std::move(item));
    } else {
      throw Bad(std::string("the pickle adds items to a ") + PickleKindName(container->kind));
    }
  }

  // The pickle opcodes this reader runs (Python's Lib/pickle.py names them).
  enum Op : uint8_t {
    kMark = '(',
    kStop = '.',
    kPop = '0',
    kBinFloat = 'G',
    kBinInt = 'J',
    kBinInt1 = 'K',
    kBinInt2 = 'M',
    kNone = 'N',
    kBinPersId = 'Q',
    kReduce = 'R',
    kBinString = 'T',
    kShortBinString = 'U',
    kBinUnicode = 'X',
    kAppend = 'a',
    kBuild = 'b',
    kGlobal = 'c',
    kAppends = 'e',
    kBinGet = 'h',
    kLongBinGet = 'j',
    kBinPut = 'q',
    kLongBinPut = 'r',
    kSetItem = 's',
    kTuple = 't',
    kSetItems = 'u',
    kEmptyDict = '}',
    kEmptyList = ']',
    kEmptyTuple = ')',
    kBinBytes = 'B',
    kShortBinBytes = 'C',
    kProto = 0x80,
    kNewObj = 0x81,
    kTuple1 = 0x85,
    kTuple2 = 0x86,
    kTuple3 = 0x87,
    kNewTrue = 0x88,
    kNewFalse = 0x89,
    kLong1 = 0x8a,
    kShortBinUnicode = 0x8c,
    kBinUnicode8 = 0x8d,
    kStackGlobal = 0x93,
    kMemoize = 0x94,
    kFrame = 0x95
  };

  void Step(uint8_t opcode) {
    if (!StepScalar(opcode) && !StepContainer(opcode) && !StepObject(opcode)) {
      throw Bad("pickle opcode 0x" + Hex(opcode) + " at byte " + std::to_string(position_ - 1) +
                " is not one torch.save writes for a state dict");
    }
  }

  // Framing, None, bools, numbers and strings.
  bool StepScalar(uint8_t opcode) {
    using Kind = PickleValue::Kind;
    switch (opcode) {
      case kProto:
        (void)Byte();
        return true;
      case kFrame:
        (void)Little<uint64_t>();
        return true;
      case kNone:
        stack_.push_back(Make(Kind::kNone));
        return true;
      case kNewTrue:
      case kNewFalse: {
        PickleRef value = Make(Kind::kBool);
        value->integer = opcode == kNewTrue;
        stack_.push_back(value);
        return true;
      }
      case kBinInt1:
        PushInt(Byte());
        return true;
      case kBinInt2:
        PushInt(Little<uint16_t>());
        return true;
      case kBinInt:
        PushInt(Little<int32_t>());
        return true;
      case kLong1: {  // little-endian two's complement of `count` bytes
        const uint8_t count = Byte();
        if (count > 8) throw Bad("an integer is wider than 64 bits");
        uint64_t bits = 0;
        const uint8_t* first = Take(count);
        for (uint8_t i = 0; i < count; ++i) bits |= uint64_t(first[i]) << (8 * i);
        if (count > 0 && count < 8 && (first[count - 1] & 0x80)) bits |= ~0ull << (8 * count);
        PushInt(static_cast<int64_t>(bits));
        return true;
      }
      case kBinFloat: {  // big-endian
        const uint8_t* first = Take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | first[i];
        PickleRef value = Make(Kind::kFloat);
        std::memcpy(&value->real, &bits, sizeof bits);
        stack_.push_back(value);
        return true;
      }
      case kBinUnicode:
      case kBinString:
        PushString(Text(Little<uint32_t>()));
        return true;
      case kShortBinUnicode:
      case kShortBinString:
        PushString(Text(Byte()));
        return true;
      case kBinUnicode8:
        PushString(Text(Little<uint64_t>()));
        return true;
      case kBinBytes:
        PushString(Text(Little<uint32_t>()), Kind::kBytes);
        return true;
      case kShortBinBytes:
        PushString(Text(Byte()), Kind::kBytes);
        return true;
      default:
        return false;
    }
  }

  // Marks, tuples, lists, dicts and the memo.
  bool StepContainer(uint8_t opcode) {
    using Kind = PickleValue::Kind;
    switch (opcode) {
      case kMark:
        marks_.push_back(stack_.size());
        return true;
      case kEmptyTuple:
        PushTuple({});
        return true;
      case kTuple:
        PushTuple(PopToMark());
        return true;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        std::vector<PickleRef> items(opcode - kTuple1 + 1);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = Pop();
        PushTuple(std::move(items));
        return true;
      }
      case kEmptyList:
        stack_.push_back(Make(Kind::kList));
        return true;
      case kEmptyDict:
        stack_.push_back(Make(Kind::kDict));
        return true;
      case kAppend: {
        PickleRef item = Pop();
        AddItems(Top(), {item});
        return true;
      }
      case kAppends:
      case kSetItems: {
        std::vector<PickleRef> items = PopToMark();
        AddItems(Top(), std::move(items));
        return true;
      }
      case kSetItem: {
        PickleRef value = Pop();
        PickleRef key = Pop();
        AddItems(Top(), {key, value});
        return true;
      }
      case kBinPut:
        Memoize(Byte());
        return true;
      case kLongBinPut:
        Memoize(Little<uint32_t>());
        return true;
      case kMemoize:
        Memoize(memo_.size());
        return true;
      case kBinGet:
        Recall(Byte());
        return true;
      case kLongBinGet:
        Recall(Little<uint32_t>());
        return true;
      case kPop:
        (void)Pop();
        return true;
      default:
        return false;
    }
  }

  // Classes, calls, object state and storages.
  bool StepObject(uint8_t opcode) {
    using Kind = PickleValue::Kind;
    switch (opcode) {
      case kGlobal: {
        std::string module = Line();
        PushString(module + "." + Line(), Kind::kGlobal);
        return true;
      }
      case kStackGlobal: {
        PickleRef name = Pop();
        PickleRef module = Pop();
        if (name->kind != Kind::kString || module->kind != Kind::kString) {
          throw Bad("STACK_GLOBAL without module and name strings");
        }
        PushString(module->text + "." + name->text, Kind::kGlobal);
        return true;
      }
      case kReduce: {
        PickleRef arguments = Pop();
        PickleRef callable = Pop();
        stack_.push_back(Reduce(*callable, *arguments));
        return true;
      }
      case kNewObj: {
        (void)Pop();
        PickleRef type = Pop();
        PickleRef object = Make(Kind::kOpaque);
        object->text = type->text;
        stack_.push_back(object);
        return true;
      }
      case kBuild:  // an object's state (a state dict's _metadata): not needed here
        (void)Pop();
        (void)Top();
        return true;
      case kBinPersId: {
        PickleRef id = Pop();
        stack_.push_back(Storage(*id));
        return true;
      }
      default:
        return false;
    }
  }

  static std::string Hex(uint8_t value) {
    const char* digits = "0123456789abcdef";
    return std::string{digits[value >> 4], digits[value & 15]};
  }

  PickleRef Reduce(const PickleValue& callable, const PickleValue& arguments) {
    using Kind = PickleValue::Kind;
    if (callable.kind != Kind::kGlobal || arguments.kind != Kind::kTuple) {
      throw Bad("REDUCE without a class and an argument tuple");
    }
    const std::string& name = callable.text;
    const auto& args = arguments.items;
    if (name == "collections.OrderedDict" && args.empty()) return Make(Kind::kDict);
    if ((name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") &&
        args.size() >= 4) {
      PickleRef tensor = Make(Kind::kTensor);
      tensor->tensor = RebuildTensor(*args[0], *args[1], *args[2], *args[3]);
      return tensor;
    }
    if ((name == "torch._utils._rebuild_parameter" ||
         name == "torch._utils._rebuild_parameter_with_state") &&
        !args.empty() && args[0]->kind == Kind::kTensor) {
      return args[0];  // an nn.Parameter: its data
    }
    if (name == "torch.jit._pickle.restore_type_tag" && !args.empty()) {
      return args[0];  // torch::pickle_save's typed containers (Dict[str, Tensor])
    }
    PickleRef opaque = Make(Kind::kOpaque);
    opaque->text = name;
    return opaque;
  }

  // A persistent id ('storage', torch.<Type>Storage, key, location, numel): the storage's
  // elements from the archive's data/<key> record, on the CPU whatever the saved location.
  PickleRef Storage(const PickleValue& id) {
    using Kind = PickleValue::Kind;
    if (id.kind != Kind::kTuple || id.items.size() < 5 || id.items[0]->text != "storage" ||
        id.items[1]->kind != Kind::kGlobal || id.items[2]->kind != Kind::kString ||
        id.items[4]->kind != Kind::kInt) {
      throw Bad("a persistent id that is not a storage");
    }
    const std::string& key = id.items[2]->text;
    auto cached = storages_.find(key);
    if (cached == storages_.end()) {
      const c10::ScalarType type = StorageElementType(id.items[1]->text);
      const int64_t count = id.items[4]->integer;
      const std::string record = "data/" + key;
      if (count < 0 || !archive_.hasRecord(record)) {
        throw Bad("storage " + key + " has no record " + record);
      }
      at::DataPtr data;
      size_t bytes = 0;
      std::tie(data, bytes) = archive_.getRecord(record);
      const uint64_t needed = uint64_t(count) * c10::elementSize(type);
      if (bytes < needed) {
        throw Bad("storage " + key + " holds " + std::to_string(bytes) + " bytes, its " +
                  std::to_string(count) + " elements need " + std::to_string(needed));
      }
      torch::Tensor storage = torch::empty({count}, torch::TensorOptions().dtype(type));
      if (needed > 0) std::memcpy(storage.data_ptr(), data.get(), needed);
      cached = storages_.emplace(key, storage).first;
    }
    PickleRef value = Make(Kind::kStorage);
    value->tensor = cached->second;
    return value;
  }

  static std::vector<int64_t> Integers(const PickleValue& tuple, const char* what) {
    if (tuple.kind != PickleValue::Kind::kTuple) throw Bad(std::string(what) + " is not a tuple");
    std::vector<int64_t> values;
    for (const auto& item : tuple.items) {
      if (item->kind != PickleValue::Kind::kInt) {
        throw Bad(std::string(what) + " holds a " + PickleKindName(item->kind));
      }
      values.push_back(item->integer);
    }
    return values;
  }

  static torch::Tensor RebuildTensor(const PickleValue& storage, const PickleValue& offset,
                                     const PickleValue& size, const PickleValue& stride) {
    if (storage.kind != PickleValue::Kind::kStorage || offset.kind != PickleValue::Kind::kInt) {
      throw Bad("a tensor without its storage and offset");
    }
    const std::vector<int64_t> sizes = Integers(size, "a tensor's size");
    const std::vector<int64_t> strides = Integers(stride, "a tensor's stride");
    if (sizes.size() != strides.size()) throw Bad("a tensor's size and stride differ in length");
    int64_t last = offset.integer;  // the highest element the view reaches
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0 || strides[d] < 0) throw Bad("a tensor with a negative size or stride");
      empty = empty || sizes[d] == 0;
      last += (sizes[d] - 1) * strides[d];
    }
    if (offset.integer < 0 || (!empty && last >= storage.tensor.numel())) {
      throw Bad("a tensor reaches past the end of its storage");
    }
    return storage.tensor.as_strided(sizes, strides, offset.integer);
  }

  caffe2::serialize::PyTorchStreamReader& archive_;
  at::DataPtr pickle_;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  size_t position_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleRef> memo_;
  std::map<std::string, torch::Tensor> storages_;
};

// The {name: tensor} dict of a torch.save archive, in the file's order.
inline std::vector<std::pair<std::string, torch::Tensor>> ReadTorchSaveStateDict(
    caffe2::serialize::PyTorchStreamReader& archive) {
  const PickleRef root = TorchSavePickle(archive).Run();
  if (root->kind != PickleValue::Kind::kDict) {
    throw InvalidArgument(std::string("holds a ") + PickleKindName(root->kind) +
                          ", not a state dict {name: tensor}");
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
    const PickleValue& key = *root->items[i];
    const PickleValue& value = *root->items[i + 1];
    if (key.kind != PickleValue::Kind::kString) {
      throw InvalidArgument(std::string("holds a dict with a ") + PickleKindName(key.kind) +
                            " key; a state dict's keys are names");
    }
    if (value.kind != PickleValue::Kind::kTensor) {
      throw InvalidArgument("holds a dict whose entry \"" + key.text + "\" is a " +
                            PickleKindName(value.kind) +
                            ", not a tensor; save module.state_dict() itself");
    }
    tensors.emplace_back(key.text, value.tensor);
  }
  return tensors;
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_PICKLE_READER_HPP
