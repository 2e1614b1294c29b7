// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the files save_state
// writes and load_state reads.
//
// Written (model ABI v3): a state dict, {name: tensor} with the module's own parameter and buffer
// names, as torch.save writes it, so Python's torch.load(path) gives the dict back and
// module.load_state_dict(torch.load(path)) loads it. Model ABI v1 and v2 plugins keep writing
// their own archive (torch::serialize::OutputArchive with the model's name under "dpl.model"),
// which only the plugin reads.
//
// Read, whatever the ABI: a torch.save archive of a state dict, a TorchScript archive
// (torch.jit.save; its parameters and buffers by name), or the older archive above, which names
// the model that wrote it.
//
// Note [State files are torch.save files]: torch.save's archives are read and written by the
// SDK's torch_files library (dpl/torch_files/, linked statically into the plugin with hidden
// visibility), the same code that reads and writes the launcher's checkpoints, --export and
// --init-from files. libtorch's own pickler would not do: torch::pickle_load turns an OrderedDict
// into None and knows no nn.Parameter, and torch::pickle_save wraps the dict in
// torch.jit._pickle.restore_type_tag, which torch.load(path, weights_only=True) refuses. The
// library returns Status values; this header turns them into PluginErrors, which Guarded turns
// into the entry's status, so nothing crosses the plugin edge.
#ifndef DPL_TORCH_MODEL_STATE_FILE_HPP
#define DPL_TORCH_MODEL_STATE_FILE_HPP

#include <sys/stat.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_files/torch_archive.hpp"
#include "dpl/torch_files/zip_archive.hpp"
#include "dpl/torch_model/errors.hpp"

namespace dpl {
namespace torch_model {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The attribute of the v1/v2 archive that names the model that wrote it.
constexpr const char* kModelNameKey = "dpl.model";

struct StateFile {
  NamedTensors tensors;               // in the file's order
  std::optional<std::string> writer;  // the model that wrote a v1/v2 archive
};

// The library's messages start with the file's path; ours with `prefix` ("state file <path>").
inline PluginError FileError(const Status& status, const std::string& path,
                             const std::string& prefix) {
  const std::string& message = status.message();
  const bool names_path = message.compare(0, path.size(), path) == 0;
  return PluginError(status.code(),
                     prefix + (names_path ? message.substr(path.size()) : ": " + message));
}

inline c10::ScalarType ScalarTypeOf(torch_files::TorchDtype dtype) {
  using torch_files::TorchDtype;
  switch (dtype) {
    case TorchDtype::kFloat32:
      return c10::kFloat;
    case TorchDtype::kFloat64:
      return c10::kDouble;
    case TorchDtype::kFloat16:
      return c10::kHalf;
    case TorchDtype::kBFloat16:
      return c10::kBFloat16;
    case TorchDtype::kInt64:
      return c10::kLong;
    case TorchDtype::kInt32:
      return c10::kInt;
    case TorchDtype::kInt16:
      return c10::kShort;
    case TorchDtype::kInt8:
      return c10::kChar;
    case TorchDtype::kUInt8:
      return c10::kByte;
    case TorchDtype::kBool:
      return c10::kBool;
  }
  return c10::kFloat;
}

// The file's dtype of a tensor's element type; a state dict holds real, integer and bool tensors.
inline torch_files::TorchDtype FileDtype(c10::ScalarType type) {
  using torch_files::TorchDtype;
  for (TorchDtype dtype :
       {TorchDtype::kFloat32, TorchDtype::kFloat64, TorchDtype::kFloat16, TorchDtype::kBFloat16,
        TorchDtype::kInt64, TorchDtype::kInt32, TorchDtype::kInt16, TorchDtype::kInt8,
        TorchDtype::kUInt8, TorchDtype::kBool}) {
    if (ScalarTypeOf(dtype) == type) return dtype;
  }
  throw PluginError(DPL_ERR_UNSUPPORTED,
                    std::string("a state dict cannot hold a tensor of ") + c10::toString(type));
}

// The tensor read, owning its bytes (no copy).
inline torch::Tensor ToTorchTensor(torch_files::TorchTensor tensor) {
  const auto options = torch::TensorOptions().dtype(ScalarTypeOf(tensor.dtype));
  if (tensor.data.empty()) return torch::empty(tensor.shape, options);
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::move(tensor.data));
  return torch::from_blob(
      bytes->data(), tensor.shape, [bytes](void*) mutable { bytes.reset(); }, options);
}

// A TorchValue's Python type as the messages below name it: any dict is a "dict".
inline std::string KindName(const torch_files::TorchValue& value) {
  if (value.AsDict()) return "dict";
  if (value.AsTensor()) return "tensor";
  return value.TypeName();
}

// The {name: tensor} dict of a torch.save archive, in the file's order.
inline NamedTensors StateDictTensors(torch_files::TorchValue root) {
  torch_files::TorchDict* dict = root.AsDict();
  if (!dict) {
    throw InvalidArgument("holds a " + KindName(root) + ", not a state dict {name: tensor}");
  }
  std::vector<std::string> names;
  for (const torch_files::TorchDictEntry& entry : dict->entries()) {
    const std::string* name = std::get_if<std::string>(&entry.key);
    if (!name) throw InvalidArgument("holds a dict with a int key; a state dict's keys are names");
    const std::string* text = entry.value.AsString();
    if (*name == "format" && text != nullptr && text->rfind("dpl-checkpoint", 0) == 0) {
      throw InvalidArgument(
          "is a dpl checkpoint, not a state dict: go on from it with --resume --checkpoint-dir "
          "and its folder, or train from its parameters with the state dict --export writes");
    }
    if (!entry.value.AsTensor()) {
      throw InvalidArgument("holds a dict whose entry \"" + *name + "\" is a " +
                            KindName(entry.value) +
                            ", not a tensor; save module.state_dict() itself");
    }
    names.push_back(*name);
  }
  NamedTensors tensors;
  for (const std::string& name : names) {
    tensors.emplace_back(name, ToTorchTensor(std::move(*dict->Find(name)->AsTensor())));
  }
  return tensors;
}

enum class ArchiveKind { kTorchSave, kTorchScript };

// What the zip archive at `path` holds, by its records: a TorchScript module (or a v1/v2 archive)
// has constants.pkl, a torch.save archive data.pkl, each in the archive's one folder.
inline ArchiveKind KindOfArchive(const std::string& path, const std::string& prefix) {
  Result<std::unique_ptr<torch_files::ZipReader>> zip = torch_files::ZipReader::Open(path);
  if (!zip.ok()) throw FileError(zip.status(), path, prefix);
  bool has_pickle = false;
  for (const torch_files::ZipRecord& record : (*zip)->records()) {
    const size_t slash = record.name.find('/');
    const std::string name = slash == std::string::npos ? "" : record.name.substr(slash + 1);
    if (name == "constants.pkl") return ArchiveKind::kTorchScript;
    has_pickle = has_pickle || name == "data.pkl";
  }
  if (!has_pickle) {
    throw InvalidArgument(prefix +
                          " is a zip archive with neither a torch.save pickle (data.pkl) nor a "
                          "TorchScript module (constants.pkl)");
  }
  return ArchiveKind::kTorchSave;
}

inline void ReadTorchScriptState(const std::string& path, const std::string& prefix,
                                 StateFile* state) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& error) {
    throw InvalidArgument(prefix + " is a TorchScript archive that cannot be loaded: " +
                          error.what_without_backtrace());
  }
  if (module.hasattr(kModelNameKey)) {
    const c10::IValue name = module.attr(kModelNameKey);
    state->writer = name.isString() ? name.toStringRef() : std::string();
  }
  for (const auto& named : module.named_parameters(/*recurse=*/true)) {
    state->tensors.emplace_back(named.name, named.value);
  }
  for (const auto& named : module.named_buffers(/*recurse=*/true)) {
    state->tensors.emplace_back(named.name, named.value);
  }
}

// `prefix` names the file in messages ("state file <path>").
inline StateFile ReadStateFile(const std::string& path, const std::string& prefix) {
  char magic[4] = {};
  {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      throw PluginError(DPL_ERR_IO, prefix + " cannot be read: " + std::strerror(errno));
    }
    file.read(magic, sizeof magic);
    // A folder opens and reads nothing, as an empty file does: each said as what it is.
    if (file.gcount() == 0) {
      struct stat info {};
      const bool folder = ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
      throw InvalidArgument(prefix + (folder ? " is a folder; name the file torch.save wrote"
                                             : " is empty; torch.save writes a zip archive"));
    }
  }
  if (std::memcmp(magic, "PK\x03\x04", sizeof magic) != 0) {
    throw InvalidArgument(prefix +
                          " is not a zip archive as torch.save and torch.jit.save write them "
                          "(the legacy format of torch.save(..., "
                          "_use_new_zipfile_serialization=False) is not read)");
  }
  StateFile state;
  if (KindOfArchive(path, prefix) == ArchiveKind::kTorchScript) {
    ReadTorchScriptState(path, prefix, &state);
    return state;
  }
  Result<torch_files::TorchValue> root = torch_files::ReadTorchArchive(path);
  if (!root.ok()) throw FileError(root.status(), path, prefix);
  try {
    state.tensors = StateDictTensors(std::move(root).value());
  } catch (const PluginError& error) {
    throw PluginError(error.status(), prefix + " " + error.what());
  }
  return state;
}

// {name: tensor} for Python's torch.load, tensors on the CPU (torch.load needs no map_location),
// a plain dict whose every global is on torch.load(weights_only=True)'s allow-list.
inline void WriteStateDict(const std::string& path, const NamedTensors& tensors) {
  torch_files::TorchDict dict;
  for (const auto& named : tensors) {
    const torch::Tensor compact = named.second.detach().to(torch::kCPU).contiguous();
    torch_files::TorchTensor tensor;
    tensor.dtype = FileDtype(compact.scalar_type());
    tensor.shape.assign(compact.sizes().begin(), compact.sizes().end());
    const auto* bytes = static_cast<const uint8_t*>(compact.data_ptr());
    tensor.data.assign(bytes, bytes + compact.nbytes());
    dict.Set(named.first, torch_files::TorchValue::Tensor(std::move(tensor)));
  }
  const Status written =
      torch_files::WriteTorchArchive(path, torch_files::TorchValue::FromDict(std::move(dict)));
  if (!written.ok()) {
    throw PluginError(written.code(), "cannot write state file " + path + ": " + written.message());
  }
}

// The archive of model ABI v1/v2 plugins.
inline void WriteLegacyArchive(const std::string& path, const std::string& model_name,
                               const NamedTensors& parameters, const NamedTensors& buffers) {
  torch::serialize::OutputArchive archive;
  archive.write(kModelNameKey, c10::IValue(model_name));
  for (const auto& named : parameters) archive.write(named.first, named.second);
  for (const auto& named : buffers) archive.write(named.first, named.second, /*is_buffer=*/true);
  try {
    archive.save_to(path);
  } catch (const c10::Error& error) {
    throw PluginError(DPL_ERR_IO, std::string("cannot write state file ") + path + ": " +
                                      error.what_without_backtrace());
  }
}

}  // namespace
}  // namespace torch_model
}  // namespace dpl

#endif  // DPL_TORCH_MODEL_STATE_FILE_HPP
