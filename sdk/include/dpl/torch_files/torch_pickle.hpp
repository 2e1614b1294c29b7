// The pickle of a torch.save archive (its data.pkl), without Python: writing a TorchValue as
// pickle protocol 2 the way torch.save lays it out, and a restricted unpickler that rebuilds only
// what a TorchValue can hold. Tensors are not in the pickle: each is a persistent id
// ('storage', torch.<Type>Storage, key, location, numel) whose bytes are the archive's record
// data/<key>, rebuilt through torch._utils._rebuild_tensor_v2 (see torch_archive.hpp).
//
// Note [A restricted unpickler]: Python's pickle runs code: GLOBAL names any function and REDUCE
// calls it, so a pickle is a program. This one knows the opcodes of protocols 2-4 that torch.save
// and libtorch's pickler emit for plain data, and recognises by name only
// collections.OrderedDict, torch._utils._rebuild_tensor(_v2), _rebuild_parameter(_with_state),
// torch.jit._pickle.restore_type_tag and the storage types of the supported dtypes. It executes
// nothing. Any other global, and an object made from one (REDUCE, NEWOBJ), is kept by name only:
// where Python would drop it (an object's BUILD state, POP) it is dropped, and where it would be
// part of the result it is refused with its name, as are bytes objects and every other opcode.
// Every read is bounds-checked, and the result is capped (nesting depth, value count, tensor
// bytes) because memo references let a small pickle describe a huge or cyclic value.
#ifndef DPL_TORCH_FILES_TORCH_PICKLE_HPP
#define DPL_TORCH_FILES_TORCH_PICKLE_HPP

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dpl/support/status.hpp"
#include "dpl/torch_files/torch_value.hpp"

namespace dpl::torch_files {

// Containers nested deeper than this are refused, when writing and when reading.
inline constexpr size_t kMaxTorchValueDepth = 200;

// The storage class torch.save names for a dtype's tensors: "FloatStorage" for float32, ...
const char* TorchStorageTypeName(TorchDtype dtype);

// Whether `text` is UTF-8 as Python's unpickler decodes it (lone surrogates allowed, as Python's
// 'surrogatepass' does).
bool IsPickleUtf8(std::string_view text);

// A pickled value: the bytes of data.pkl, and the tensors whose data become the storages: key
// std::to_string(i) is storages[i], which points into the value that was pickled.
struct TorchPickle {
  std::string bytes;
  std::vector<const TorchTensor*> storages;
};

// Pickles `root`. Refuses (InvalidArgument, naming the value's place, e.g. root['model']['w']) a
// tensor whose data does not match its shape and dtype, a string that is not UTF-8, and nesting
// deeper than kMaxTorchValueDepth.
Result<TorchPickle> PickleTorchValue(const TorchValue& root);

// The bytes of storage `key` (the archive's record data/<key>), or why they cannot be read.
using TorchStorageLoader = std::function<Result<std::vector<uint8_t>>(const std::string& key)>;

struct UnpickleLimits {
  uint64_t max_tensor_bytes = uint64_t(1)
                              << 30;        // all tensors built, shared ones counted each time
  uint64_t max_values = uint64_t(1) << 24;  // values in the result
};

// Unpickles `size` bytes at `data`. `record` names them in messages ("archive/data.pkl"); every
// refusal says what was found at which byte and, for a global, its name.
Result<TorchValue> UnpickleTorchValue(const uint8_t* data, size_t size, const std::string& record,
                                      const TorchStorageLoader& load_storage,
                                      const UnpickleLimits& limits);

}  // namespace dpl::torch_files

#endif  // DPL_TORCH_FILES_TORCH_PICKLE_HPP
