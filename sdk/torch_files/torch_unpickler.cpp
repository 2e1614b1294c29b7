#include "torch_unpickler.hpp"

#include "pickle_opcodes.hpp"

namespace dpl::torch_files {
namespace pickle {

// Moves a container's children to `out`.
void TakeChildren(Node& node, std::vector<NodeRef>* out) {
  const auto take = [out](std::vector<NodeRef>& items) {
    for (NodeRef& item : items) out->push_back(std::move(item));
    items.clear();
  };
  if (ListNode* list = std::get_if<ListNode>(&node.payload)) take(list->items);
  if (TupleNode* tuple = std::get_if<TupleNode>(&node.payload)) take(tuple->items);
  if (DictNode* dict = std::get_if<DictNode>(&node.payload)) {
    for (auto& entry : dict->entries) out->push_back(std::move(entry.second));
    dict->entries.clear();
  }
}

// Frees the nodes only this one holds without recursing: a hostile pickle may nest millions deep.
Node::~Node() {
  std::vector<NodeRef> pending;
  TakeChildren(*this, &pending);
  while (!pending.empty()) {
    NodeRef next = std::move(pending.back());
    pending.pop_back();
    if (next.use_count() == 1) TakeChildren(*next, &pending);  // `next` then dies childless
  }
}

// What a node is, for messages.
std::string Describe(const NodeRef& node) {
  switch (node->payload.index()) {
    case 0:
      return "a " + std::get<TorchValue>(node->payload).TypeName();
    case 1:
      return "a list";
    case 2:
      return "a tuple";
    case 3:
      return "a dict";
    case 4:
      return "a function";
    case 5:
      return "a storage type";
    case 6:
      return "a storage";
    case 7:
      return "a bytes object";
    default:
      return "the Python object '" + std::get<ForeignObject>(node->payload).name + "'";
  }
}

namespace {

// The opcode's name as CPython's pickletools prints it, for the common ones this reader refuses.
std::string OpcodeName(uint8_t op) {
  static constexpr struct {
    uint8_t op;
    const char* name;
  } kNames[] = {{'1', "POP_MARK"},   {'2', "DUP"},       {'F', "FLOAT"},      {'I', "INT"},
                {'L', "LONG"},       {'P', "PERSID"},    {'S', "STRING"},     {'V', "UNICODE"},
                {'d', "DICT"},       {'g', "GET"},       {'i', "INST"},       {'l', "LIST"},
                {'o', "OBJ"},        {'p', "PUT"},       {0x92, "NEWOBJ_EX"}, {0x8e, "BINBYTES8"},
                {0x8f, "EMPTY_SET"}, {0x91, "FROZENSET"}};
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  for (const auto& known : kNames) {
    if (known.op == op) return std::string(known.name) + " (" + hex + ")";
  }
  return hex;
}

}  // namespace

Unpickler::~Unpickler() {
  std::vector<NodeRef> children;
  for (const std::weak_ptr<Node>& weak : containers_) {
    if (const NodeRef node = weak.lock()) TakeChildren(*node, &children);
  }
}

Result<TorchValue> Unpickler::Run() {
  NodeRef result;
  while (!result) {
    op_at_ = at_;
    uint8_t op = 0;
    if (!Take(1, &op)) return Malformed("it ends without a STOP opcode");
    if (op == pickle::kStop) {
      DPL_RETURN_IF_ERROR(Pop(&result));
    } else {
      DPL_RETURN_IF_ERROR(Step(op));
    }
  }
  // Drop every other reference, so that conversion can move what only the result holds.
  stack_.clear();
  memo_.clear();
  storages_.clear();
  in_result_ = true;  // messages from here on are about the result, not one opcode
  return Convert(result, 0, false);
}

// Each family of opcodes is handled by its own step; an opcode no family knows is refused.
Status Unpickler::Step(uint8_t op) {
  using FamilyStep = std::optional<Status> (Unpickler::*)(uint8_t);
  for (const FamilyStep step :
       {&Unpickler::StepStream, &Unpickler::StepScalar, &Unpickler::StepContainer,
        &Unpickler::StepMemo, &Unpickler::StepObject}) {
    if (std::optional<Status> done = (this->*step)(op)) return *std::move(done);
  }
  return Unsupported("the pickle opcode " + OpcodeName(op));
}

std::optional<Status> Unpickler::StepStream(uint8_t op) {
  switch (op) {
    case pickle::kProto: {
      uint8_t protocol = 0;
      DPL_RETURN_IF_ERROR(TakeOrFail(1, &protocol));
      if (protocol > 5) {
        return Malformed("pickle protocol " + std::to_string(protocol) + " is newer than 5");
      }
      return Status::Ok();
    }
    case pickle::kFrame: {
      uint64_t ignored = 0;
      return TakeLittle(8, &ignored);
    }
    default:
      return std::nullopt;
  }
}

std::optional<Status> Unpickler::StepScalar(uint8_t op) {
  switch (op) {
    case pickle::kNone:
      PushValue(TorchValue::None());
      return Status::Ok();
    case pickle::kNewTrue:
    case pickle::kNewFalse:
      PushValue(TorchValue::Bool(op == pickle::kNewTrue));
      return Status::Ok();
    case pickle::kBinInt1:
    case pickle::kBinInt2:
    case pickle::kBinInt:
    case pickle::kLong1:
    case pickle::kLong4:
      return Integer(op);
    case pickle::kBinFloat:
      return Float();
    case pickle::kShortBinUnicode:
    case pickle::kShortBinString:
      return Text(1);
    case pickle::kBinUnicode:
    case pickle::kBinString:
      return Text(4);
    case pickle::kBinUnicode8:
      return Text(8);
    case pickle::kShortBinBytes:
      return Bytes(1);
    case pickle::kBinBytes:
      return Bytes(4);
    default:
      return std::nullopt;
  }
}

std::optional<Status> Unpickler::StepContainer(uint8_t op) {
  switch (op) {
    case pickle::kMark:
      marks_.push_back(stack_.size());
      return Status::Ok();
    case pickle::kPop: {
      NodeRef dropped;
      return Pop(&dropped);
    }
    case pickle::kEmptyList:
      PushContainer(ListNode{});
      return Status::Ok();
    case pickle::kEmptyTuple:
      PushContainer(TupleNode{});
      return Status::Ok();
    case pickle::kEmptyDict:
      PushContainer(DictNode{});
      return Status::Ok();
    case pickle::kTuple:
    case pickle::kTuple1:
    case pickle::kTuple2:
    case pickle::kTuple3: {
      TupleNode tuple;
      DPL_RETURN_IF_ERROR(op == pickle::kTuple
                              ? PopMark(&tuple.items)
                              : PopTop(size_t(op - pickle::kTuple1 + 1), &tuple.items));
      PushContainer(std::move(tuple));
      return Status::Ok();
    }
    case pickle::kSetItem:
    case pickle::kSetItems: {
      std::vector<NodeRef> items;
      DPL_RETURN_IF_ERROR(op == pickle::kSetItem ? PopTop(2, &items) : PopMark(&items));
      return SetItems(items);
    }
    case pickle::kAppend:
    case pickle::kAppends: {
      std::vector<NodeRef> items;
      DPL_RETURN_IF_ERROR(op == pickle::kAppend ? PopTop(1, &items) : PopMark(&items));
      return Appends(items);
    }
    default:
      return std::nullopt;
  }
}

std::optional<Status> Unpickler::StepMemo(uint8_t op) {
  switch (op) {
    case pickle::kBinPut:
      return Memo(1, true);
    case pickle::kLongBinPut:
      return Memo(4, true);
    case pickle::kMemoize:
      return Memo(0, true);
    case pickle::kBinGet:
      return Memo(1, false);
    case pickle::kLongBinGet:
      return Memo(4, false);
    default:
      return std::nullopt;
  }
}

std::optional<Status> Unpickler::StepObject(uint8_t op) {
  switch (op) {
    case pickle::kGlobal: {
      std::string module, name;
      DPL_RETURN_IF_ERROR(TakeLine(&module));
      DPL_RETURN_IF_ERROR(TakeLine(&name));
      return Global(module, name);
    }
    case pickle::kStackGlobal:
      return StackGlobal();
    case pickle::kBinPersId:
      return PersistentId();
    case pickle::kReduce:
      return Reduce();
    case pickle::kNewObj:
      return NewObject();
    case pickle::kBuild:
      return Build();
    default:
      return std::nullopt;
  }
}

Status Unpickler::Float() {
  uint8_t bytes[8] = {};
  DPL_RETURN_IF_ERROR(TakeOrFail(8, bytes));
  uint64_t bits = 0;
  for (uint8_t b : bytes) bits = (bits << 8) | b;
  double value;
  std::memcpy(&value, &bits, 8);
  PushValue(TorchValue::Float(value));
  return Status::Ok();
}

Status Unpickler::Integer(uint8_t op) {
  uint64_t bits = 0;
  int64_t value = 0;
  if (op == pickle::kBinInt1 || op == pickle::kBinInt2) {
    DPL_RETURN_IF_ERROR(TakeLittle(op == pickle::kBinInt1 ? 1 : 2, &bits));
    value = int64_t(bits);
  } else if (op == pickle::kBinInt) {
    DPL_RETURN_IF_ERROR(TakeLittle(4, &bits));
    value = int32_t(uint32_t(bits));
  } else {
    uint64_t length = 0;
    DPL_RETURN_IF_ERROR(TakeLittle(op == pickle::kLong1 ? 1 : 4, &length));
    if (length > size_ - at_) return Malformed("an integer runs past the end");
    const uint8_t* bytes = data_ + at_;
    at_ += size_t(length);
    // Two's complement, little-endian: it fits int64 when every byte beyond the eighth only
    // repeats the sign.
    const size_t low = size_t(std::min<uint64_t>(length, 8));
    for (size_t i = 0; i < low; ++i) bits |= uint64_t(bytes[i]) << (8 * i);
    if (low > 0 && low < 8 && (bytes[low - 1] & 0x80)) bits |= ~uint64_t(0) << (8 * low);
    const uint8_t sign = (low > 0 && (bytes[low - 1] & 0x80)) ? 0xFF : 0x00;
    for (size_t i = 8; i < length; ++i) {
      if (bytes[i] != sign) return Unsupported("an integer that does not fit 64 bits");
    }
    value = int64_t(bits);
  }
  PushValue(TorchValue::Int(value));
  return Status::Ok();
}

Status Unpickler::Text(size_t length_bytes) {
  uint64_t length = 0;
  DPL_RETURN_IF_ERROR(TakeLittle(length_bytes, &length));
  if (length > size_ - at_) return Malformed("a string runs past the end");
  std::string text(reinterpret_cast<const char*>(data_ + at_), size_t(length));
  at_ += size_t(length);
  if (!IsPickleUtf8(text)) return Malformed("a string is not valid UTF-8");
  PushValue(TorchValue::String(std::move(text)));
  return Status::Ok();
}

Status Unpickler::Bytes(size_t length_bytes) {
  uint64_t length = 0;
  DPL_RETURN_IF_ERROR(TakeLittle(length_bytes, &length));
  if (length > size_ - at_) return Malformed("a bytes object runs past the end");
  at_ += size_t(length);
  Push(MakeNode(BytesNode{length}));
  return Status::Ok();
}

Status Unpickler::Memo(size_t index_bytes, bool put) {
  uint64_t index = memo_.size();
  if (index_bytes > 0) DPL_RETURN_IF_ERROR(TakeLittle(index_bytes, &index));
  if (put) {
    NodeRef top;
    DPL_RETURN_IF_ERROR(Top(&top));
    memo_[index] = std::move(top);
    return Status::Ok();
  }
  const auto found = memo_.find(index);
  if (found == memo_.end()) {
    return Malformed("it refers to memo entry " + std::to_string(index) + ", never stored");
  }
  Push(found->second);
  return Status::Ok();
}

Status Unpickler::SetItems(std::vector<NodeRef>& items) {
  NodeRef target;
  DPL_RETURN_IF_ERROR(Top(&target));
  if (As<ForeignObject>(target)) return Status::Ok();  // dropped with it (Build())
  DictNode* dict = As<DictNode>(target);
  if (!dict) return Malformed("SETITEM(S) on " + Describe(target) + ", not a dict");
  if (items.size() % 2 != 0) return Malformed("SETITEMS with an odd number of objects");
  for (size_t i = 0; i < items.size(); i += 2) {
    const TorchValue* key = As<TorchValue>(items[i]);
    TorchDictKey dict_key;
    if (key && key->AsString()) {
      dict_key = *key->AsString();
    } else if (key && key->AsInt()) {
      dict_key = *key->AsInt();
    } else {
      return Unsupported("a dict key that is " + Describe(items[i]) + " (keys must be str or int)");
    }
    const auto [position, inserted] = dict->index.emplace(dict_key, dict->entries.size());
    if (inserted) {
      dict->entries.emplace_back(std::move(dict_key), std::move(items[i + 1]));
    } else {
      dict->entries[position->second].second = std::move(items[i + 1]);
    }
  }
  return Status::Ok();
}

Status Unpickler::Appends(std::vector<NodeRef>& items) {
  NodeRef target;
  DPL_RETURN_IF_ERROR(Top(&target));
  if (As<ForeignObject>(target)) return Status::Ok();  // dropped with it (Build())
  ListNode* list = As<ListNode>(target);
  if (!list) return Malformed("APPEND(S) on " + Describe(target) + ", not a list");
  for (NodeRef& item : items) list->items.push_back(std::move(item));
  return Status::Ok();
}

Status Unpickler::StackGlobal() {
  NodeRef name, module;
  DPL_RETURN_IF_ERROR(Pop(&name));
  DPL_RETURN_IF_ERROR(Pop(&module));
  const TorchValue* name_value = As<TorchValue>(name);
  const TorchValue* module_value = As<TorchValue>(module);
  if (!name_value || !name_value->AsString() || !module_value || !module_value->AsString()) {
    return Malformed("STACK_GLOBAL needs two strings");
  }
  return Global(*module_value->AsString(), *name_value->AsString());
}

}  // namespace pickle

Result<TorchValue> UnpickleTorchValue(const uint8_t* data, size_t size, const std::string& record,
                                      const TorchStorageLoader& load_storage,
                                      const UnpickleLimits& limits) {
  pickle::Unpickler unpickler(data, size, record, load_storage, limits);
  return unpickler.Run();
}

}  // namespace dpl::torch_files
