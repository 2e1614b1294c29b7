// The Python values a torch.save archive holds, as plain C++ values, so that the launcher can read
// and write PyTorch's own files without libtorch (torch_archive.hpp): None, bool, int, float, str,
// list, tuple, dict / collections.OrderedDict (insertion order kept) and dense CPU tensors. That is
// everything a state dict, an optimizer's state dict or a training checkpoint of plain data holds.
//
// Values are ordinary copyable C++ values (no sharing): a tensor that Python stored twice (tied
// weights) is read as two equal tensors.
#ifndef DPL_TORCH_FILES_TORCH_VALUE_HPP
#define DPL_TORCH_FILES_TORCH_VALUE_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace dpl::torch_files {

// The tensor element types supported, named as in torch (torch.float32, ...).
enum class TorchDtype : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
};

// Bytes per element: 4 for kFloat32, 1 for kBool, ...
size_t TorchDtypeSize(TorchDtype dtype);
// torch's name without "torch.": "float32", "bfloat16", "int64", "bool", ...
const char* TorchDtypeName(TorchDtype dtype);

// The dtype of a C++ element type: float, double, int64_t, int32_t, int16_t, int8_t, uint8_t,
// bool. float16 and bfloat16 have no C++ type here; build those tensors from their bytes.
template <typename T>
struct TorchDtypeOf;
template <>
struct TorchDtypeOf<float> : std::integral_constant<TorchDtype, TorchDtype::kFloat32> {};
template <>
struct TorchDtypeOf<double> : std::integral_constant<TorchDtype, TorchDtype::kFloat64> {};
template <>
struct TorchDtypeOf<int64_t> : std::integral_constant<TorchDtype, TorchDtype::kInt64> {};
template <>
struct TorchDtypeOf<int32_t> : std::integral_constant<TorchDtype, TorchDtype::kInt32> {};
template <>
struct TorchDtypeOf<int16_t> : std::integral_constant<TorchDtype, TorchDtype::kInt16> {};
template <>
struct TorchDtypeOf<int8_t> : std::integral_constant<TorchDtype, TorchDtype::kInt8> {};
template <>
struct TorchDtypeOf<uint8_t> : std::integral_constant<TorchDtype, TorchDtype::kUInt8> {};
template <>
struct TorchDtypeOf<bool> : std::integral_constant<TorchDtype, TorchDtype::kBool> {};

// A dense tensor on the CPU: `data` holds NumElements() elements of `dtype`, row-major
// (contiguous), little-endian. bool elements are one byte, 0 or 1.
struct TorchTensor {
  TorchDtype dtype = TorchDtype::kFloat32;
  std::vector<int64_t> shape;  // {} is a 0-d tensor (one element); a 0 anywhere, an empty one
  std::vector<uint8_t> data;

  // The product of `shape` (1 for a 0-d tensor); -1 when a dim is negative or the product does
  // not fit int64.
  int64_t NumElements() const;
  // Whether `shape` is valid and `data` holds exactly NumElements() elements of `dtype`.
  bool HasConsistentSize() const;

  // A tensor of `shape` holding `values` (which must hold the product of `shape` elements).
  template <typename T>
  static TorchTensor Of(std::vector<int64_t> shape, const std::vector<T>& values);
  // The elements as T, or nullopt when T is not this tensor's dtype (TorchDtypeOf<T>).
  template <typename T>
  std::optional<std::vector<T>> Values() const;

  bool operator==(const TorchTensor& other) const {
    return dtype == other.dtype && shape == other.shape && data == other.data;
  }
  bool operator!=(const TorchTensor& other) const { return !(*this == other); }
};

class TorchValue;
struct TorchDictEntry;

// A dict key: Python str (UTF-8) or int. State dicts have str keys; an optimizer's state dict
// keys its per-parameter state by int.
using TorchDictKey = std::variant<std::string, int64_t>;

// A Python dict or collections.OrderedDict: entries in insertion order, each key once.
class TorchDict {
 public:
  // Which Python type the dict is read as and written as: nn.Module.state_dict() returns an
  // OrderedDict, most other dicts are plain; torch.load gives back the type that was written.
  enum class PythonType { kDict, kOrderedDict };

  explicit TorchDict(PythonType python_type = PythonType::kDict);
  TorchDict(const TorchDict& other);
  TorchDict(TorchDict&& other) noexcept;
  TorchDict& operator=(const TorchDict& other);
  TorchDict& operator=(TorchDict&& other) noexcept;
  ~TorchDict();

  PythonType python_type() const { return python_type_; }
  void set_python_type(PythonType python_type) { python_type_ = python_type; }
  size_t size() const;
  bool empty() const { return size() == 0; }

  // The value under `key`, or nullptr.
  const TorchValue* Find(std::string_view key) const;
  TorchValue* Find(std::string_view key);
  const TorchValue* Find(int64_t key) const;
  TorchValue* Find(int64_t key);
  const TorchValue* Find(const TorchDictKey& key) const;
  // Python's d[key] = value: replaces the value of an existing key in place, else appends.
  void Set(TorchDictKey key, TorchValue value);

  // The entries in insertion order.
  const std::vector<TorchDictEntry>& entries() const { return entries_; }
  std::vector<TorchDictEntry>::const_iterator begin() const;
  std::vector<TorchDictEntry>::const_iterator end() const;

  bool operator==(const TorchDict& other) const;
  bool operator!=(const TorchDict& other) const { return !(*this == other); }

 private:
  PythonType python_type_;
  std::vector<TorchDictEntry> entries_;
  std::map<std::string, size_t, std::less<>> string_index_;  // key -> position in entries_
  std::map<int64_t, size_t> int_index_;
};

// One Python value. Build with the static constructors, e.g.
//   TorchValue checkpoint = TorchValue::Dict({{"epoch", TorchValue::Int(3)},
//                                             {"model", TorchValue::OrderedDict({...})}});
// and inspect with kind(), the As...() accessors (nullptr for another kind) and Find().
class TorchValue {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kList, kTuple, kDict, kTensor };
  using Items = std::vector<TorchValue>;
  using Entries = std::vector<std::pair<TorchDictKey, TorchValue>>;

  TorchValue() = default;  // None
  static TorchValue None() { return TorchValue(); }
  static TorchValue Bool(bool value);
  static TorchValue Int(int64_t value);
  static TorchValue Float(double value);  // a Python float (double precision)
  static TorchValue String(std::string utf8);
  static TorchValue List(Items items = {});
  static TorchValue Tuple(Items items = {});
  // A plain dict / an OrderedDict of `entries` in that order (a repeated key keeps its first
  // position and its last value, as in Python).
  static TorchValue Dict(Entries entries = {});
  static TorchValue OrderedDict(Entries entries = {});
  static TorchValue FromDict(TorchDict dict);
  static TorchValue Tensor(TorchTensor tensor);

  Kind kind() const;
  // The Python type's name: "None", "bool", "int", "float", "str", "list", "tuple", "dict",
  // "OrderedDict", "Tensor".
  std::string TypeName() const;
  bool IsNone() const { return kind() == Kind::kNone; }

  // The value as one kind, or nullptr when it is of another kind. AsSequence() is a list's or a
  // tuple's items.
  const bool* AsBool() const;
  const int64_t* AsInt() const;
  const double* AsFloat() const;
  const std::string* AsString() const;
  const Items* AsList() const;
  Items* AsList();
  const Items* AsTuple() const;
  Items* AsTuple();
  const Items* AsSequence() const;
  const TorchDict* AsDict() const;
  TorchDict* AsDict();
  const TorchTensor* AsTensor() const;
  TorchTensor* AsTensor();

  // Shortcuts for dicts: the value under `key`, or nullptr when this is no dict or lacks `key`.
  const TorchValue* Find(std::string_view key) const;
  const TorchValue* Find(int64_t key) const;

  // Same kind and same value, in the same order; floats (and tensor elements) compare by their
  // bits, so a NaN equals itself.
  bool operator==(const TorchValue& other) const;
  bool operator!=(const TorchValue& other) const { return !(*this == other); }

 private:
  struct ListItems {
    Items items;
  };
  struct TupleItems {
    Items items;
  };
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string, ListItems,
                               TupleItems, TorchDict, TorchTensor>;
  // Built in place: GCC 12 warns (wrongly) of a maybe-uninitialized variant moved from a temporary.
  template <typename T>
  static TorchValue Make(T value) {
    TorchValue result;
    result.value_.emplace<T>(std::move(value));
    return result;
  }
  Storage value_;
};

struct TorchDictEntry {
  TorchDictKey key;
  TorchValue value;
};

// A key as Python's repr() writes it: 'name' or 3 (for messages).
std::string TorchDictKeyRepr(const TorchDictKey& key);

template <typename T>
TorchTensor TorchTensor::Of(std::vector<int64_t> shape, const std::vector<T>& values) {
  TorchTensor tensor;
  tensor.dtype = TorchDtypeOf<T>::value;
  tensor.shape = std::move(shape);
  tensor.data.resize(values.size() * sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) tensor.data[i] = values[i] ? 1 : 0;
  } else if (!values.empty()) {
    std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
  }
  return tensor;
}

template <typename T>
std::optional<std::vector<T>> TorchTensor::Values() const {
  if (dtype != TorchDtypeOf<T>::value) return std::nullopt;
  std::vector<T> values(data.size() / sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) values[i] = data[i] != 0;
  } else if (!values.empty()) {
    std::memcpy(values.data(), data.data(), values.size() * sizeof(T));
  }
  return values;
}

}  // namespace dpl::torch_files

#endif  // DPL_TORCH_FILES_TORCH_VALUE_HPP
