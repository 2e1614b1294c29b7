#include "dpl/torch_files/torch_value.hpp"

namespace dpl::torch_files {
namespace {

// The position `index` has for `key`; a new key is given `next`.
template <typename Index, typename Key>
size_t PositionOf(Index& index, const Key& key, size_t next) {
  return index.emplace(key, next).first->second;
}

}  // namespace

size_t TorchDtypeSize(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat64:
    case TorchDtype::kInt64:
      return 8;
    case TorchDtype::kFloat32:
    case TorchDtype::kInt32:
      return 4;
    case TorchDtype::kFloat16:
    case TorchDtype::kBFloat16:
    case TorchDtype::kInt16:
      return 2;
    case TorchDtype::kInt8:
    case TorchDtype::kUInt8:
    case TorchDtype::kBool:
      return 1;
  }
  return 1;
}

const char* TorchDtypeName(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kFloat32:
      return "float32";
    case TorchDtype::kFloat64:
      return "float64";
    case TorchDtype::kFloat16:
      return "float16";
    case TorchDtype::kBFloat16:
      return "bfloat16";
    case TorchDtype::kInt64:
      return "int64";
    case TorchDtype::kInt32:
      return "int32";
    case TorchDtype::kInt16:
      return "int16";
    case TorchDtype::kInt8:
      return "int8";
    case TorchDtype::kUInt8:
      return "uint8";
    case TorchDtype::kBool:
      return "bool";
  }
  return "unknown";
}

int64_t TorchTensor::NumElements() const {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return -1;
  }
  return count;
}

bool TorchTensor::HasConsistentSize() const {
  const int64_t count = NumElements();
  uint64_t bytes = 0;
  return count >= 0 && !__builtin_mul_overflow(uint64_t(count), TorchDtypeSize(dtype), &bytes) &&
         bytes == data.size();
}

TorchDict::TorchDict(PythonType python_type) : python_type_(python_type) {}
TorchDict::TorchDict(const TorchDict& other) = default;
TorchDict::TorchDict(TorchDict&& other) noexcept = default;
TorchDict& TorchDict::operator=(const TorchDict& other) = default;
TorchDict& TorchDict::operator=(TorchDict&& other) noexcept = default;
TorchDict::~TorchDict() = default;

size_t TorchDict::size() const {
  return entries_.size();
}

std::vector<TorchDictEntry>::const_iterator TorchDict::begin() const {
  return entries_.begin();
}
std::vector<TorchDictEntry>::const_iterator TorchDict::end() const {
  return entries_.end();
}

const TorchValue* TorchDict::Find(std::string_view key) const {
  const auto found = string_index_.find(key);
  return found == string_index_.end() ? nullptr : &entries_[found->second].value;
}

TorchValue* TorchDict::Find(std::string_view key) {
  return const_cast<TorchValue*>(static_cast<const TorchDict*>(this)->Find(key));
}

const TorchValue* TorchDict::Find(int64_t key) const {
  const auto found = int_index_.find(key);
  return found == int_index_.end() ? nullptr : &entries_[found->second].value;
}

TorchValue* TorchDict::Find(int64_t key) {
  return const_cast<TorchValue*>(static_cast<const TorchDict*>(this)->Find(key));
}

const TorchValue* TorchDict::Find(const TorchDictKey& key) const {
  if (const auto* text = std::get_if<std::string>(&key)) return Find(std::string_view(*text));
  return Find(std::get<int64_t>(key));
}

void TorchDict::Set(TorchDictKey key, TorchValue value) {
  const size_t next = entries_.size();
  const auto* text = std::get_if<std::string>(&key);
  const size_t position = text ? PositionOf(string_index_, *text, next)
                               : PositionOf(int_index_, std::get<int64_t>(key), next);
  if (position == next) {
    entries_.push_back(TorchDictEntry{std::move(key), std::move(value)});
  } else {
    entries_[position].value = std::move(value);
  }
}

bool TorchDict::operator==(const TorchDict& other) const {
  if (python_type_ != other.python_type_ || entries_.size() != other.entries_.size()) return false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].key != other.entries_[i].key || entries_[i].value != other.entries_[i].value) {
      return false;
    }
  }
  return true;
}

TorchValue TorchValue::Bool(bool value) {
  return Make<bool>(value);
}
TorchValue TorchValue::Int(int64_t value) {
  return Make<int64_t>(value);
}
TorchValue TorchValue::Float(double value) {
  return Make<double>(value);
}
TorchValue TorchValue::String(std::string utf8) {
  return Make<std::string>(std::move(utf8));
}
TorchValue TorchValue::List(Items items) {
  return Make<ListItems>(ListItems{std::move(items)});
}
TorchValue TorchValue::Tuple(Items items) {
  return Make<TupleItems>(TupleItems{std::move(items)});
}
TorchValue TorchValue::Tensor(TorchTensor tensor) {
  return Make<TorchTensor>(std::move(tensor));
}
TorchValue TorchValue::FromDict(TorchDict dict) {
  return Make<TorchDict>(std::move(dict));
}

TorchValue TorchValue::Dict(Entries entries) {
  TorchDict dict(TorchDict::PythonType::kDict);
  for (auto& [key, value] : entries) dict.Set(std::move(key), std::move(value));
  return FromDict(std::move(dict));
}

TorchValue TorchValue::OrderedDict(Entries entries) {
  TorchValue value = Dict(std::move(entries));
  value.AsDict()->set_python_type(TorchDict::PythonType::kOrderedDict);
  return value;
}

TorchValue::Kind TorchValue::kind() const {
  switch (value_.index()) {
    case 1:
      return Kind::kBool;
    case 2:
      return Kind::kInt;
    case 3:
      return Kind::kFloat;
    case 4:
      return Kind::kString;
    case 5:
      return Kind::kList;
    case 6:
      return Kind::kTuple;
    case 7:
      return Kind::kDict;
    case 8:
      return Kind::kTensor;
    default:
      return Kind::kNone;
  }
}

std::string TorchValue::TypeName() const {
  switch (kind()) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return AsDict()->python_type() == TorchDict::PythonType::kOrderedDict ? "OrderedDict"
                                                                            : "dict";
    case Kind::kTensor:
      return "Tensor";
  }
  return "None";
}

const bool* TorchValue::AsBool() const {
  return std::get_if<bool>(&value_);
}
const int64_t* TorchValue::AsInt() const {
  return std::get_if<int64_t>(&value_);
}
const double* TorchValue::AsFloat() const {
  return std::get_if<double>(&value_);
}
const std::string* TorchValue::AsString() const {
  return std::get_if<std::string>(&value_);
}
const TorchDict* TorchValue::AsDict() const {
  return std::get_if<TorchDict>(&value_);
}
TorchDict* TorchValue::AsDict() {
  return std::get_if<TorchDict>(&value_);
}
const TorchTensor* TorchValue::AsTensor() const {
  return std::get_if<TorchTensor>(&value_);
}
TorchTensor* TorchValue::AsTensor() {
  return std::get_if<TorchTensor>(&value_);
}

const TorchValue::Items* TorchValue::AsList() const {
  const auto* list = std::get_if<ListItems>(&value_);
  return list ? &list->items : nullptr;
}
TorchValue::Items* TorchValue::AsList() {
  auto* list = std::get_if<ListItems>(&value_);
  return list ? &list->items : nullptr;
}
const TorchValue::Items* TorchValue::AsTuple() const {
  const auto* tuple = std::get_if<TupleItems>(&value_);
  return tuple ? &tuple->items : nullptr;
}
TorchValue::Items* TorchValue::AsTuple() {
  auto* tuple = std::get_if<TupleItems>(&value_);
  return tuple ? &tuple->items : nullptr;
}
const TorchValue::Items* TorchValue::AsSequence() const {
  const Items* list = AsList();
  return list ? list : AsTuple();
}

const TorchValue* TorchValue::Find(std::string_view key) const {
  const TorchDict* dict = AsDict();
  return dict ? dict->Find(key) : nullptr;
}

const TorchValue* TorchValue::Find(int64_t key) const {
  const TorchDict* dict = AsDict();
  return dict ? dict->Find(key) : nullptr;
}

bool TorchValue::operator==(const TorchValue& other) const {
  if (value_.index() != other.value_.index()) return false;
  switch (kind()) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return *AsBool() == *other.AsBool();
    case Kind::kInt:
      return *AsInt() == *other.AsInt();
    case Kind::kFloat:
      return std::memcmp(AsFloat(), other.AsFloat(), sizeof(double)) == 0;
    case Kind::kString:
      return *AsString() == *other.AsString();
    case Kind::kList:
    case Kind::kTuple:
      return *AsSequence() == *other.AsSequence();
    case Kind::kDict:
      return *AsDict() == *other.AsDict();
    case Kind::kTensor:
      return *AsTensor() == *other.AsTensor();
  }
  return false;
}

std::string TorchDictKeyRepr(const TorchDictKey& key) {
  if (const auto* text = std::get_if<std::string>(&key)) return "'" + *text + "'";
  return std::to_string(std::get<int64_t>(key));
}

}  // namespace dpl::torch_files
