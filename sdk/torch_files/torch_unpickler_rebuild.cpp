// What the globals the unpickler knows build (Note [A restricted unpickler]): OrderedDicts,
// storages and tensors; and the conversion of the result into TorchValues, within the limits.
#include "torch_unpickler.hpp"

namespace dpl::torch_files::pickle {
namespace {

// A global's name for a message: printable ASCII only, at most 100 characters.
std::string Printable(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 100)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return text.size() > 100 ? out + "..." : out;
}

// Copies the view at `source` with `strides` (in elements) into tensor->data, row-major; the
// view's last element was checked to lie inside its storage, and tensor->data is sized.
void GatherView(const uint8_t* source, const std::vector<int64_t>& strides, TorchTensor* tensor) {
  const int64_t count = tensor->NumElements();
  const uint64_t element = TorchDtypeSize(tensor->dtype);
  const std::vector<int64_t>& shape = tensor->shape;
  bool contiguous = true;
  int64_t expected_stride = 1;  // every dim is >= 1 here, so this stays below `count`
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expected_stride) contiguous = false;
    expected_stride *= shape[d];
  }
  if (contiguous) {
    std::memcpy(tensor->data.data(), source, tensor->data.size());
    return;
  }
  // Odometer over the index; the offsets cannot overflow, as the view's last element did not.
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t position = 0;
    for (size_t d = 0; d < index.size(); ++d) position += index[d] * strides[d];
    std::memcpy(tensor->data.data() + uint64_t(i) * element, source + uint64_t(position) * element,
                size_t(element));
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

namespace {

// The globals a state dict needs, by module and name.
std::optional<Callable> KnownCallable(const std::string& module, const std::string& name) {
  static const struct {
    const char* module;
    const char* name;
    Callable callable;
  } kKnown[] = {
      {"collections", "OrderedDict", Callable::kOrderedDict},
      {"torch._utils", "_rebuild_tensor_v2", Callable::kRebuildTensor},
      {"torch._utils", "_rebuild_tensor", Callable::kRebuildTensorV1},
      {"torch._utils", "_rebuild_parameter", Callable::kRebuildParameter},
      {"torch._utils", "_rebuild_parameter_with_state", Callable::kRebuildParameterWithState},
      {"torch.jit._pickle", "restore_type_tag", Callable::kRestoreTypeTag},
  };
  for (const auto& known : kKnown) {
    if (module == known.module && name == known.name) return known.callable;
  }
  return std::nullopt;
}

}  // namespace

Status Unpickler::Global(const std::string& module, const std::string& name) {
  if (const std::optional<Callable> callable = KnownCallable(module, name)) {
    Push(MakeNode(*callable));
    return Status::Ok();
  }
  const std::string full = Printable(module + "." + name);
  if (module == "torch") {
    for (TorchDtype dtype :
         {TorchDtype::kFloat32, TorchDtype::kFloat64, TorchDtype::kFloat16, TorchDtype::kBFloat16,
          TorchDtype::kInt64, TorchDtype::kInt32, TorchDtype::kInt16, TorchDtype::kInt8,
          TorchDtype::kUInt8, TorchDtype::kBool}) {
      if (name == TorchStorageTypeName(dtype)) {
        Push(MakeNode(StorageType{dtype}));
        return Status::Ok();
      }
    }
    if (name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0) {
      return Unsupported("a tensor of storage type " + full + " (supported dtypes: float32, " +
                         "float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool)");
    }
  }
  if (module == "torch._utils" && name.rfind("_rebuild_", 0) == 0) {
    return Unsupported("a tensor rebuilt by " + full +
                       " (sparse, quantized or other special tensors; only dense ones are read)");
  }
  Push(MakeNode(ForeignObject{full, op_at_}));
  return Status::Ok();
}

Status Unpickler::ForeignGlobal(const ForeignObject& object) const {
  return Status::InvalidArgument(
      record_ + " calls the Python global '" + object.name + "' (at byte " +
      std::to_string(object.at) +
      "), which is not part of a state dict; this reader runs no Python code and rebuilds only " +
      "tensors, None, bools, ints, floats, strings, lists, tuples and dicts: save plain data, " +
      "such as model.state_dict()");
}

Status Unpickler::PersistentId() {
  NodeRef pid;
  DPL_RETURN_IF_ERROR(Pop(&pid));
  const TupleNode* tuple = As<TupleNode>(pid);
  const auto string_at = [&](size_t i) -> const std::string* {
    const TorchValue* value = As<TorchValue>(tuple->items[i]);
    return value ? value->AsString() : nullptr;
  };
  if (!tuple || tuple->items.size() != 5 || !string_at(0) || *string_at(0) != "storage") {
    return Unsupported("a persistent id other than torch's ('storage', type, key, location, " +
                       std::string("numel)"));
  }
  const StorageType* type = As<StorageType>(tuple->items[1]);
  const std::string* key = string_at(2);
  const TorchValue* numel = As<TorchValue>(tuple->items[4]);
  if (!type || !key || !string_at(3) || !numel || !numel->AsInt() || *numel->AsInt() < 0) {
    return Malformed("a storage's persistent id is not (str, storage type, str, str, int >= 0)");
  }
  // The location (e.g. 'cuda:0') is ignored: the bytes are the same, and the host reads to CPU.
  const auto cached = storages_.find(*key);
  if (cached != storages_.end()) {
    if (std::get<Storage>(cached->second->payload).dtype != type->dtype) {
      return Unsupported("storage '" + Printable(*key) + "' viewed as two dtypes");
    }
    Push(cached->second);
    return Status::Ok();
  }
  const uint64_t element = TorchDtypeSize(type->dtype);
  const uint64_t count = uint64_t(*numel->AsInt());
  uint64_t expected = 0;
  if (__builtin_mul_overflow(count, element, &expected) || expected > limits_.max_tensor_bytes) {
    return Malformed("storage '" + Printable(*key) + "' claims " + std::to_string(count) +
                     " elements, more than the file can hold");
  }
  Result<std::vector<uint8_t>> bytes = load_storage_(*key);
  if (!bytes.ok()) return bytes.status();
  if (bytes->size() != expected) {
    return Malformed("storage '" + Printable(*key) + "' should hold " + std::to_string(count) +
                     " " + TorchDtypeName(type->dtype) + " elements (" + std::to_string(expected) +
                     " bytes) but its record has " + std::to_string(bytes->size()) + " bytes");
  }
  NodeRef node =
      MakeNode(Storage{type->dtype, int64_t(count),
                       std::make_shared<const std::vector<uint8_t>>(std::move(bytes).value())});
  storages_.emplace(*key, node);
  Push(std::move(node));
  return Status::Ok();
}

Status Unpickler::Reduce() {
  NodeRef args_node, callable_node;
  DPL_RETURN_IF_ERROR(Pop(&args_node));
  DPL_RETURN_IF_ERROR(Pop(&callable_node));
  const TupleNode* args = As<TupleNode>(args_node);
  if (const ForeignObject* foreign = As<ForeignObject>(callable_node)) {
    if (!args) return Malformed("REDUCE's arguments are " + Describe(args_node) + ", not a tuple");
    Push(MakeNode(*foreign));  // what calling it would give, by its name only
    return Status::Ok();
  }
  const Callable* callable = As<Callable>(callable_node);
  if (!callable) return Malformed("REDUCE calls " + Describe(callable_node));
  if (!args) return Malformed("REDUCE's arguments are " + Describe(args_node) + ", not a tuple");
  switch (*callable) {
    case Callable::kOrderedDict: {
      if (!args->items.empty()) return Unsupported("an OrderedDict built from arguments");
      DictNode dict;
      dict.python_type = TorchDict::PythonType::kOrderedDict;
      PushContainer(std::move(dict));
      return Status::Ok();
    }
    case Callable::kRebuildTensor:
    case Callable::kRebuildTensorV1:
      return RebuildTensor(*callable, args->items);
    case Callable::kRebuildParameter:
    case Callable::kRebuildParameterWithState:
      return RebuildParameter(*callable, args->items);
    case Callable::kRestoreTypeTag:
      // libtorch's pickler tags typed containers (Dict[str, Tensor]); the value is the first.
      if (args->items.size() != 2) return Malformed("restore_type_tag takes (value, type)");
      Push(args->items[0]);
      return Status::Ok();
  }
  return Status::Ok();
}

// An nn.Parameter is read as its tensor; its requires_grad, hooks and state are dropped.
Status Unpickler::RebuildParameter(Callable callable, const std::vector<NodeRef>& args) {
  const size_t count = callable == Callable::kRebuildParameter ? 3 : 4;
  const TorchValue* data = args.size() == count ? As<TorchValue>(args[0]) : nullptr;
  if (!data || !data->AsTensor()) {
    return Malformed(callable == Callable::kRebuildParameter
                         ? "_rebuild_parameter's arguments are not (tensor, bool, hooks)"
                         : "_rebuild_parameter_with_state's arguments are not (tensor, bool, "
                           "hooks, state)");
  }
  Push(args[0]);
  return Status::Ok();
}

// NEWOBJ: class.__new__(class, *args), before BUILD or SETITEMS fill the object in.
Status Unpickler::NewObject() {
  NodeRef args_node, class_node;
  DPL_RETURN_IF_ERROR(Pop(&args_node));
  DPL_RETURN_IF_ERROR(Pop(&class_node));
  if (!As<TupleNode>(args_node)) {
    return Malformed("NEWOBJ's arguments are " + Describe(args_node) + ", not a tuple");
  }
  if (const ForeignObject* foreign = As<ForeignObject>(class_node)) {
    Push(MakeNode(*foreign));
    return Status::Ok();
  }
  const Callable* callable = As<Callable>(class_node);
  if (!callable || *callable != Callable::kOrderedDict) {
    return Malformed("NEWOBJ makes an object of " + Describe(class_node) + ", not of a class");
  }
  DictNode dict;  // OrderedDict.__new__ makes an empty one, whatever the arguments
  dict.python_type = TorchDict::PythonType::kOrderedDict;
  PushContainer(std::move(dict));
  return Status::Ok();
}

Status Unpickler::Build() {
  NodeRef state, target;
  DPL_RETURN_IF_ERROR(Pop(&state));
  DPL_RETURN_IF_ERROR(Top(&target));
  // An object this reader keeps by name only takes any state (and any items, SetItems() and
  // Appends()): it is refused if it reaches the result, and dropped with them otherwise.
  if (As<ForeignObject>(target)) return Status::Ok();
  // torch gives a state dict's OrderedDict its _metadata (module versions) as attribute state:
  // that is Python-side bookkeeping, dropped here (load_state_dict works without it).
  const DictNode* dict = As<DictNode>(target);
  const DictNode* attributes = As<DictNode>(state);
  const TorchValue* none = As<TorchValue>(state);
  if (!dict || dict->python_type != TorchDict::PythonType::kOrderedDict ||
      !(attributes || (none && none->IsNone()))) {
    return Unsupported("object state (BUILD) for " + Describe(target));
  }
  return Status::Ok();
}

Status Unpickler::Shape(const NodeRef& node, const char* what, std::vector<int64_t>* out) const {
  const TupleNode* tuple = As<TupleNode>(node);
  if (!tuple) return Malformed(std::string("a tensor's ") + what + " is not a tuple");
  for (const NodeRef& item : tuple->items) {
    const TorchValue* value = As<TorchValue>(item);
    if (!value || !value->AsInt() || *value->AsInt() < 0) {
      return Malformed(std::string("a tensor's ") + what + " holds something not an int >= 0");
    }
    out->push_back(*value->AsInt());
  }
  return Status::Ok();
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
// [, metadata]), or the older _rebuild_tensor(storage, storage_offset, size, stride): the view is
// gathered into a contiguous copy, whatever its offset and strides.
Status Unpickler::RebuildTensor(Callable callable, const std::vector<NodeRef>& args) {
  DPL_RETURN_IF_ERROR(callable == Callable::kRebuildTensorV1 ? CheckRebuildTensorV1Arguments(args)
                                                             : CheckRebuildTensorArguments(args));
  const Storage& storage = *As<Storage>(args[0]);
  const int64_t offset = *As<TorchValue>(args[1])->AsInt();
  TorchTensor tensor;
  tensor.dtype = storage.dtype;
  std::vector<int64_t> strides;
  DPL_RETURN_IF_ERROR(Shape(args[2], "size", &tensor.shape));
  DPL_RETURN_IF_ERROR(Shape(args[3], "stride", &strides));
  if (strides.size() != tensor.shape.size()) {
    return Malformed("a tensor's size and stride differ in length");
  }
  const int64_t count = tensor.NumElements();
  const uint64_t element = TorchDtypeSize(tensor.dtype);
  uint64_t bytes = 0;
  if (count < 0 || __builtin_mul_overflow(uint64_t(count), element, &bytes)) {
    return TensorsTooLarge();
  }
  DPL_RETURN_IF_ERROR(ChargeTensorBytes(bytes));
  DPL_RETURN_IF_ERROR(CheckViewInStorage(storage, offset, tensor.shape, strides));
  tensor.data.resize(size_t(bytes));
  if (count > 0) {
    GatherView(storage.bytes->data() + uint64_t(offset) * element, strides, &tensor);
  }
  PushValue(TorchValue::Tensor(std::move(tensor)));
  return Status::Ok();
}

// Types only, here and below: the size and stride tuples are read by Shape().
Status Unpickler::CheckRebuildTensorV1Arguments(const std::vector<NodeRef>& args) const {
  const Storage* storage = args.size() == 4 ? As<Storage>(args[0]) : nullptr;
  const TorchValue* offset = storage ? As<TorchValue>(args[1]) : nullptr;
  if (!offset || !offset->AsInt() || *offset->AsInt() < 0) {
    return Malformed("_rebuild_tensor's arguments are not (storage, int, tuple, tuple)");
  }
  return Status::Ok();
}

Status Unpickler::CheckRebuildTensorArguments(const std::vector<NodeRef>& args) const {
  if (args.size() != 6 && args.size() != 7) {
    return Malformed("_rebuild_tensor_v2 takes 6 or 7 arguments, not " +
                     std::to_string(args.size()));
  }
  const Storage* storage = As<Storage>(args[0]);
  const TorchValue* offset = As<TorchValue>(args[1]);
  const TorchValue* requires_grad = As<TorchValue>(args[4]);
  const DictNode* hooks = As<DictNode>(args[5]);
  if (!storage || !offset || !offset->AsInt() || *offset->AsInt() < 0 || !requires_grad ||
      !requires_grad->AsBool() || !hooks) {
    return Malformed("_rebuild_tensor_v2's arguments are not (storage, int, tuple, tuple, bool, " +
                     std::string("OrderedDict)"));
  }
  if (!hooks->entries.empty()) return Unsupported("a tensor with backward hooks");
  if (args.size() == 7) {
    const DictNode* metadata = As<DictNode>(args[6]);
    const TorchValue* none = As<TorchValue>(args[6]);
    if (!(metadata && metadata->entries.empty()) && !(none && none->IsNone())) {
      return Unsupported("a tensor with metadata");
    }
  }
  return Status::Ok();
}

// The last element a view of `shape` and `strides` from `offset` reads must lie inside the
// storage; a view of no elements reads none.
Status Unpickler::CheckViewInStorage(const Storage& storage, int64_t offset,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& strides) const {
  for (int64_t dim : shape) {
    if (dim == 0) return Status::Ok();
  }
  int64_t last = offset;
  for (size_t d = 0; d < strides.size(); ++d) {
    int64_t step = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      last = INT64_MAX;
    }
  }
  if (last >= storage.numel) {
    return Malformed("a tensor's view reaches element " + std::to_string(last) +
                     " of a storage of " + std::to_string(storage.numel));
  }
  return Status::Ok();
}

// A node reachable twice (shared here or above) is copied; one reachable once is moved.
Result<TorchValue> Unpickler::Convert(const NodeRef& node, size_t depth, bool shared_above) {
  if (depth > kMaxTorchValueDepth) {
    return Unsupported("containers nested deeper than " + std::to_string(kMaxTorchValueDepth));
  }
  if (node->converting) return Unsupported("a container that contains itself");
  if (++values_ > limits_.max_values) {
    return Unsupported("more than " + std::to_string(limits_.max_values) + " values");
  }
  const bool shared = shared_above || node.use_count() > 1;
  if (TorchValue* value = As<TorchValue>(node)) {
    if (const TorchTensor* tensor = value->AsTensor(); tensor && shared) {
      // A copy of a shared tensor (tied weights) costs memory again.
      DPL_RETURN_IF_ERROR(ChargeTensorBytes(tensor->data.size()));
    }
    return shared ? *value : std::move(*value);
  }
  node->converting = true;
  Result<TorchValue> result = TorchValue::None();
  if (const ListNode* list = As<ListNode>(node)) {
    Result<TorchValue::Items> items = ConvertItems(list->items, depth, shared);
    if (!items.ok()) return items.status();
    result = TorchValue::List(std::move(items).value());
  } else if (const TupleNode* tuple = As<TupleNode>(node)) {
    Result<TorchValue::Items> items = ConvertItems(tuple->items, depth, shared);
    if (!items.ok()) return items.status();
    result = TorchValue::Tuple(std::move(items).value());
  } else if (const DictNode* dict = As<DictNode>(node)) {
    TorchDict out(dict->python_type);
    for (const auto& [key, item] : dict->entries) {
      Result<TorchValue> converted = Convert(item, depth + 1, shared);
      if (!converted.ok()) return converted.status();
      out.Set(key, std::move(converted).value());
    }
    result = TorchValue::FromDict(std::move(out));
  } else if (const ForeignObject* foreign = As<ForeignObject>(node)) {
    return ForeignGlobal(*foreign);
  } else {
    return Unsupported(Describe(node) + " where a value belongs");
  }
  node->converting = false;
  return result;
}

// The items of a list or a tuple at `depth`.
Result<TorchValue::Items> Unpickler::ConvertItems(const std::vector<NodeRef>& items, size_t depth,
                                                  bool shared) {
  TorchValue::Items converted_items;
  for (const NodeRef& item : items) {
    Result<TorchValue> converted = Convert(item, depth + 1, shared);
    if (!converted.ok()) return converted.status();
    converted_items.push_back(std::move(converted).value());
  }
  return converted_items;
}

}  // namespace dpl::torch_files::pickle
