// The restricted unpickler of torch_pickle.hpp (Note [A restricted unpickler]), shared by
// torch_unpickler.cpp (the pickle machine: opcodes, stack, memo) and torch_unpickler_rebuild.cpp
// (what the few known globals build, and turning the result into TorchValues). Internal to them.
//
// Pickle objects are shared: the memo lets later opcodes refer to an earlier object, and
// containers are filled after they were memoized. So unpickling builds a graph of shared Nodes
// first, and only the result is turned into (unshared) TorchValues, with the limits applied.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <variant>

#include "dpl/torch_files/torch_pickle.hpp"

namespace dpl::torch_files::pickle {

struct Node;
using NodeRef = std::shared_ptr<Node>;

// The callables REDUCE may call (NEWOBJ: the class OrderedDict).
enum class Callable {
  kOrderedDict,
  kRebuildTensor,              // _rebuild_tensor_v2
  kRebuildTensorV1,            // _rebuild_tensor, torch's older form: no requires_grad, hooks
  kRebuildParameter,           // _rebuild_parameter: (data, requires_grad, hooks)
  kRebuildParameterWithState,  // (data, requires_grad, hooks, state): the state is dropped
  kRestoreTypeTag,             // torch.jit._pickle.restore_type_tag(value, type): the value
};

struct ListNode {
  std::vector<NodeRef> items;
};
struct TupleNode {
  std::vector<NodeRef> items;
};
struct DictNode {
  TorchDict::PythonType python_type = TorchDict::PythonType::kDict;
  std::vector<std::pair<TorchDictKey, NodeRef>> entries;
  std::map<TorchDictKey, size_t> index;
};
struct StorageType {
  TorchDtype dtype;
};
struct Storage {
  TorchDtype dtype;
  int64_t numel;
  std::shared_ptr<const std::vector<uint8_t>> bytes;
};
// A Python bytes object (BINBYTES): skipped, as no TorchValue holds one.
struct BytesNode {
  uint64_t size;
};
// A global this reader does not know, or an object made from one by REDUCE or NEWOBJ (Note [A
// restricted unpickler]): its name only, refused if it reaches the result.
struct ForeignObject {
  std::string name;  // "module.name", printable
  size_t at;         // the byte of its GLOBAL, for the refusal
};

struct Node {
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  // A scalar or a tensor is a finished TorchValue.
  std::variant<TorchValue, ListNode, TupleNode, DictNode, Callable, StorageType, Storage, BytesNode,
               ForeignObject>
      payload;
  bool converting = false;  // on the path being converted: seeing it again means a cycle
};

// Moves a container's children to `out`.
void TakeChildren(Node& node, std::vector<NodeRef>* out);

template <typename T>
NodeRef MakeNode(T payload) {
  auto node = std::make_shared<Node>();
  node->payload = std::move(payload);
  return node;
}

template <typename T>
T* As(const NodeRef& node) {
  return std::get_if<T>(&node->payload);
}

// What a node is, for messages: "a list", "a storage", ...
std::string Describe(const NodeRef& node);

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, const std::string& record,
            const TorchStorageLoader& load_storage, const UnpickleLimits& limits)
      : data_(data), size_(size), record_(record), load_storage_(load_storage), limits_(limits) {}

  // Empties every container, so that reference cycles of a hostile pickle are freed too.
  ~Unpickler();
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  Result<TorchValue> Run();

 private:
  // --- reading ---
  bool Take(size_t n, void* out) {
    if (size_ - at_ < n) return false;
    std::memcpy(out, data_ + at_, n);
    at_ += n;
    return true;
  }
  Status TakeOrFail(size_t n, void* out) {
    return Take(n, out) ? Status::Ok() : Malformed("it ends inside an opcode's argument");
  }
  Status TakeLittle(size_t bytes, uint64_t* value) {
    uint8_t buffer[8] = {};
    DPL_RETURN_IF_ERROR(TakeOrFail(bytes, buffer));
    *value = 0;
    for (size_t i = 0; i < bytes; ++i) *value |= uint64_t(buffer[i]) << (8 * i);
    return Status::Ok();
  }
  Status TakeLine(std::string* line) {
    const void* newline = std::memchr(data_ + at_, '\n', size_ - at_);
    if (!newline) return Malformed("a GLOBAL's name has no end of line");
    const size_t end = size_t(static_cast<const uint8_t*>(newline) - data_);
    line->assign(reinterpret_cast<const char*>(data_ + at_), end - at_);
    at_ = end + 1;
    return Status::Ok();
  }

  // --- messages ---
  // " at byte N" of the current opcode; nothing once the messages are about the result.
  std::string Where() const { return in_result_ ? "" : " at byte " + std::to_string(op_at_); }
  Status Malformed(const std::string& what) const {
    return Status::InvalidArgument(record_ + " is not a valid pickle" + Where() + ": " + what +
                                   "; write the file again with torch.save");
  }
  Status Unsupported(const std::string& what) const {
    return Status::InvalidArgument(record_ + " holds " + what + Where() +
                                   ", which this reader does not rebuild: it reads tensors, " +
                                   "None, bools, ints, floats, strings, lists, tuples and " +
                                   "dicts, as a state dict holds");
  }
  Status TensorsTooLarge() const {
    return Malformed("its tensors would take more than " +
                     std::to_string(limits_.max_tensor_bytes) + " bytes");
  }
  // Counts `bytes` more of tensors built against limits_.max_tensor_bytes.
  Status ChargeTensorBytes(uint64_t bytes) {
    if (__builtin_add_overflow(tensor_bytes_, bytes, &tensor_bytes_) ||
        tensor_bytes_ > limits_.max_tensor_bytes) {
      return TensorsTooLarge();
    }
    return Status::Ok();
  }

  // --- the stack; a MARK is a floor that pops may not go below ---
  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Status Pop(NodeRef* out) {
    if (stack_.size() <= Floor()) return Malformed("an opcode pops from an empty stack");
    *out = std::move(stack_.back());
    stack_.pop_back();
    return Status::Ok();
  }
  Status Top(NodeRef* out) const {
    if (stack_.size() <= Floor()) return Malformed("an opcode needs an object on the stack");
    *out = stack_.back();
    return Status::Ok();
  }
  Status PopMark(std::vector<NodeRef>* items) {
    if (marks_.empty()) return Malformed("an opcode needs a MARK that was not set");
    const size_t mark = marks_.back();
    marks_.pop_back();
    items->assign(std::make_move_iterator(stack_.begin() + long(mark)),
                  std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return Status::Ok();
  }
  // The top `count` objects, in stack order.
  Status PopTop(size_t count, std::vector<NodeRef>* items) {
    items->resize(count);
    for (size_t i = count; i-- > 0;) DPL_RETURN_IF_ERROR(Pop(&(*items)[i]));
    return Status::Ok();
  }
  void Push(NodeRef node) { stack_.push_back(std::move(node)); }
  void PushValue(TorchValue value) { Push(MakeNode(std::move(value))); }
  template <typename T>
  void PushContainer(T payload) {
    NodeRef node = MakeNode(std::move(payload));
    containers_.push_back(node);
    Push(std::move(node));
  }

  // --- the opcodes, by family: each family's step is nullopt for an opcode not its own ---
  Status Step(uint8_t op);
  std::optional<Status> StepStream(uint8_t op);  // protocol and frames
  std::optional<Status> StepScalar(uint8_t op);  // None, bools, ints, floats, strings
  std::optional<Status> StepContainer(uint8_t op);
  std::optional<Status> StepMemo(uint8_t op);
  std::optional<Status> StepObject(uint8_t op);  // globals, storages, calls, object state
  Status Integer(uint8_t op);
  Status Float();
  Status Text(size_t length_bytes);
  Status Memo(size_t index_bytes, bool put);
  Status SetItems(std::vector<NodeRef>& items);  // into the dict on top of the stack
  Status Appends(std::vector<NodeRef>& items);   // to the list on top of the stack
  Status StackGlobal();
  Status Global(const std::string& module, const std::string& name);
  Status PersistentId();
  Status Reduce();
  Status NewObject();
  Status Build();
  Status Bytes(size_t length_bytes);
  Status RebuildTensor(Callable callable, const std::vector<NodeRef>& args);
  Status RebuildParameter(Callable callable, const std::vector<NodeRef>& args);
  Status CheckRebuildTensorArguments(const std::vector<NodeRef>& args) const;
  Status CheckRebuildTensorV1Arguments(const std::vector<NodeRef>& args) const;
  Status ForeignGlobal(const ForeignObject& object) const;  // the refusal of one in the result
  Status CheckViewInStorage(const Storage& storage, int64_t offset,
                            const std::vector<int64_t>& shape,
                            const std::vector<int64_t>& strides) const;
  Status Shape(const NodeRef& node, const char* what, std::vector<int64_t>* out) const;
  Result<TorchValue> Convert(const NodeRef& node, size_t depth, bool shared_above);
  Result<TorchValue::Items> ConvertItems(const std::vector<NodeRef>& items, size_t depth,
                                         bool shared);

  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
  size_t op_at_ = 0;  // where the current opcode starts
  bool in_result_ = false;
  const std::string& record_;
  const TorchStorageLoader& load_storage_;
  UnpickleLimits limits_;
  std::vector<NodeRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, NodeRef> memo_;
  std::map<std::string, NodeRef> storages_;      // by key, so a shared storage is read once
  std::vector<std::weak_ptr<Node>> containers_;  // every list, tuple and dict made
  uint64_t tensor_bytes_ = 0;                    // built so far, against limits_.max_tensor_bytes
  uint64_t values_ = 0;
};

}  // namespace dpl::torch_files::pickle
