// dpl SDK, libtorch model helper (internal part of dpl/torch_model.hpp): the files save_state
// writes and load_state reads.
//
// Written (model ABI v3): a state dict, {name: tensor} with the module's own parameter and buffer
// names, as torch.save writes it (Note [Writing torch.save files]), so Python's torch.load(path)
// gives the dict back and module.load_state_dict(torch.load(path)) loads it.
// Model ABI v1 and v2 plugins keep writing their own archive (torch::serialize::OutputArchive
// with the model's name under "dpl.model"), which only the plugin reads.
//
// Read, whatever the ABI: a torch.save archive of a state dict (Note [Reading torch.save files]),
// a TorchScript archive (torch.jit.save; its parameters and buffers by name), or the older
// archive above, which names the model that wrote it.
#ifndef DPL_TORCH_MODEL_STATE_FILE_HPP
#define DPL_TORCH_MODEL_STATE_FILE_HPP

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dpl/torch_model/errors.hpp"
#include "dpl/torch_model/pickle_reader.hpp"
#include "dpl/torch_model/pickle_writer.hpp"

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

inline std::string SystemError() {
  return std::strerror(errno);
}

// `prefix` names the file in messages ("state file <path>").
inline StateFile ReadStateFile(const std::string& path, const std::string& prefix) {
  char magic[4] = {};
  {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw PluginError(DPL_ERR_IO, prefix + " cannot be read: " + SystemError());
    file.read(magic, sizeof magic);
  }
  if (std::memcmp(magic, "PK\x03\x04", sizeof magic) != 0) {
    throw InvalidArgument(prefix +
                          " is not a zip archive as torch.save and torch.jit.save write them "
                          "(the legacy format of torch.save(..., "
                          "_use_new_zipfile_serialization=False) is not read)");
  }
  std::optional<caffe2::serialize::PyTorchStreamReader> archive;
  try {
    archive.emplace(path);
  } catch (const c10::Error& error) {
    throw PluginError(DPL_ERR_IO, prefix + " cannot be read: " + error.what_without_backtrace());
  }
  StateFile state;
  if (archive->hasRecord("constants.pkl")) {  // a TorchScript module, or a v1/v2 archive
    torch::jit::Module module;
    try {
      module = torch::jit::load(path, torch::Device(torch::kCPU));
    } catch (const c10::Error& error) {
      throw InvalidArgument(prefix + " is a TorchScript archive that cannot be loaded: " +
                            error.what_without_backtrace());
    }
    if (module.hasattr(kModelNameKey)) {
      const c10::IValue name = module.attr(kModelNameKey);
      state.writer = name.isString() ? name.toStringRef() : std::string();
    }
    for (const auto& named : module.named_parameters(/*recurse=*/true)) {
      state.tensors.emplace_back(named.name, named.value);
    }
    for (const auto& named : module.named_buffers(/*recurse=*/true)) {
      state.tensors.emplace_back(named.name, named.value);
    }
    return state;
  }
  if (!archive->hasRecord("data.pkl")) {
    throw InvalidArgument(prefix +
                          " is a zip archive with neither a torch.save pickle (data.pkl) nor a "
                          "TorchScript module (constants.pkl)");
  }
  try {
    state.tensors = ReadTorchSaveStateDict(*archive);
  } catch (const PluginError& error) {
    throw PluginError(error.status(), prefix + " " + error.what());
  } catch (const c10::Error& error) {
    throw PluginError(DPL_ERR_IO, prefix + " cannot be read: " + error.what_without_backtrace());
  }
  return state;
}

// {name: tensor} for Python's torch.load, tensors on the CPU (torch.load needs no map_location;
// Note [Writing torch.save files]).
inline void WriteStateDict(const std::string& path, const NamedTensors& tensors) {
  NamedTensors compact;
  for (const auto& named : tensors) {
    compact.emplace_back(named.first, named.second.detach().to(torch::kCPU).contiguous());
  }
  WriteTorchSaveStateDict(path, compact);
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
