#include "training/checkpoint_folder.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "dpl/torch_files/torch_archive.hpp"

namespace dpl::training {

using torch_files::ReadTorchArchive;
using torch_files::TorchDict;
using torch_files::TorchDictEntry;
using torch_files::TorchDtype;
using torch_files::TorchTensor;
using torch_files::TorchValue;
using torch_files::WriteTorchArchive;
namespace {

constexpr const char* kPartFormat = "dpl-checkpoint-part";
constexpr const char* kManifestFormat = "dpl-checkpoint-manifest";
constexpr int64_t kFolderFormatVersion = 1;
constexpr std::chrono::milliseconds kPartPoll{20};

Status MakeFolder(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::Ok();
  return Status::Io("creating checkpoint folder " + path + " failed: " + std::strerror(errno));
}

Status SyncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Io("opening folder " + path + " failed: " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const Status status =
      synced ? Status::Ok()
             : Status::Io("fsync of folder " + path + " failed: " + std::strerror(errno));
  ::close(fd);
  return status;
}

// The staging folder of `global_step` in `directory`, created (with `directory`) when missing.
Result<std::string> StagingFolder(const std::string& directory, int64_t global_step) {
  DPL_RETURN_IF_ERROR(MakeFolder(directory));
  const std::string staging = directory + "/" + StagingFolderName(global_step);
  DPL_RETURN_IF_ERROR(MakeFolder(staging));
  return staging;
}

Status Damaged(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("checkpoint " + path + " " + what +
                                 "; it was not written by dpl, or is damaged");
}

// The int field `key` of `dict`, or what is wrong.
Result<int64_t> IntField(const TorchValue& dict, const char* key, const std::string& path) {
  const TorchValue* value = dict.Find(key);
  const int64_t* number = value ? value->AsInt() : nullptr;
  if (number == nullptr) return Damaged(path, std::string("has no valid '") + key + "'");
  return *number;
}

Result<std::string> StringField(const TorchValue& dict, const char* key, const std::string& path) {
  const TorchValue* value = dict.Find(key);
  const std::string* text = value ? value->AsString() : nullptr;
  if (text == nullptr) return Damaged(path, std::string("has no valid '") + key + "'");
  return *text;
}

// Checks the format and version of a part or manifest and that it belongs to `step` and `world`.
Status CheckHeader(const TorchValue& root, const char* format, int64_t step, int64_t world,
                   const std::string& path) {
  Result<std::string> read_format = StringField(root, "format", path);
  if (!read_format.ok() || *read_format != format) {
    return Damaged(path, std::string("is not a '") + format + "' file");
  }
  Result<int64_t> version = IntField(root, "version", path);
  if (!version.ok()) return version.status();
  if (*version != kFolderFormatVersion) {
    return Status::InvalidArgument("checkpoint " + path + " has format version " +
                                   std::to_string(*version) + " but this launcher reads version " +
                                   std::to_string(kFolderFormatVersion));
  }
  Result<int64_t> read_step = IntField(root, "global_step", path);
  Result<int64_t> read_world = IntField(root, "world_size", path);
  if (!read_step.ok()) return read_step.status();
  if (!read_world.ok()) return read_world.status();
  if (*read_step != step || *read_world != world) {
    return Damaged(path, "is of step " + std::to_string(*read_step) + " at world size " +
                             std::to_string(*read_world) + ", its manifest of step " +
                             std::to_string(step) + " at world size " + std::to_string(world));
  }
  return Status::Ok();
}

// One parameter's optimizer state being assembled from the parts: state k's values and which
// elements some run gave.
struct Assembly {
  bool known = false;  // shape and given are set
  std::vector<int64_t> shape;
  std::vector<std::vector<float>> state;
  std::vector<uint8_t> given;
};

// Whether `state` (a run's state dict from element `offset` of `parameter`) gives again what
// runs gave before, the same bits: with --shard-optimizer on and the shared-memory sums across
// machines, the parts are cut among a machine's workers, so the workers of one local rank on
// every machine hold the same part, and each writes it. Other values are refused; a run that is
// not all given before is the caller's to check.
Result<bool> RepeatsAGivenRun(const TorchDict& state, int64_t offset, const Assembly& assembly,
                              const std::vector<std::string>& names, const std::string& parameter,
                              const std::string& path) {
  if (state.empty() || offset < 0) return false;
  for (const TorchDictEntry& entry : state) {
    const std::string* name = std::get_if<std::string>(&entry.key);
    const TorchTensor* tensor = entry.value.AsTensor();
    if (name == nullptr || tensor == nullptr || tensor->dtype != TorchDtype::kFloat32 ||
        tensor->shape.size() != 1 || !tensor->HasConsistentSize()) {
      return false;  // AddRun says what is wrong with it
    }
    const size_t first = size_t(offset), n = size_t(tensor->shape[0]);
    if (n == 0 || first > assembly.given.size() || n > assembly.given.size() - first) return false;
    for (size_t i = first; i < first + n; ++i) {
      if (assembly.given[i] == 0) return false;
    }
    const size_t k = size_t(std::find(names.begin(), names.end(), *name) - names.begin());
    if (k == names.size() || k >= assembly.state.size() || assembly.state[k].empty()) return false;
    if (std::memcmp(assembly.state[k].data() + first, tensor->data.data(), n * sizeof(float)) !=
        0) {
      return Damaged(path, "gives elements " + std::to_string(first) + "-" +
                               std::to_string(first + n - 1) + " of '" + parameter +
                               "' again, with other values than another part gave");
    }
  }
  return true;
}

Status AddRun(const TorchValue& run, const std::string& path, const CheckpointState& checkpoint,
              std::map<std::string, Assembly>* assemblies, std::vector<std::string>* names) {
  Result<std::string> parameter = StringField(run, "parameter", path);
  Result<int64_t> offset = IntField(run, "offset", path);
  if (!parameter.ok()) return parameter.status();
  if (!offset.ok()) return offset.status();
  const TorchValue* state = run.Find("state");
  if (state == nullptr || state->AsDict() == nullptr) return Damaged(path, "has a run no state");
  Assembly& assembly = (*assemblies)[*parameter];
  if (!assembly.known) {
    const NamedTensor* value = nullptr;
    for (const NamedTensor& entry : checkpoint.model) {
      if (entry.name == *parameter) value = &entry;
    }
    if (value == nullptr || value->tensor.dtype != TorchDtype::kFloat32) {
      return Damaged(path, "has optimizer state of '" + *parameter +
                               "', which its state.pt holds no float32 parameter of");
    }
    assembly.shape = value->tensor.shape;
    assembly.given.assign(size_t(value->tensor.NumElements()), 0);
    assembly.known = true;
  }
  DPL_ASSIGN_OR_RETURN(const bool repeated, RepeatsAGivenRun(*state->AsDict(), *offset, assembly,
                                                             *names, *parameter, path));
  if (repeated) return Status::Ok();
  const size_t elements = assembly.given.size();
  for (const TorchDictEntry& entry : *state->AsDict()) {
    const std::string* name = std::get_if<std::string>(&entry.key);
    const TorchTensor* tensor = entry.value.AsTensor();
    if (name == nullptr || tensor == nullptr || tensor->dtype != TorchDtype::kFloat32 ||
        tensor->shape.size() != 1 || !tensor->HasConsistentSize()) {
      return Damaged(path, "has state of '" + *parameter + "' that is no 1-D float32 tensor");
    }
    const size_t n = size_t(tensor->shape[0]);
    if (*offset < 0 || size_t(*offset) > elements || n > elements - size_t(*offset)) {
      return Damaged(path, "has a run of '" + *parameter + "' outside its " +
                               std::to_string(elements) + " elements");
    }
    size_t k = 0;
    while (k < names->size() && (*names)[k] != *name) ++k;
    if (k == names->size()) names->push_back(*name);
    if (assembly.state.size() <= k) assembly.state.resize(k + 1);
    if (assembly.state[k].empty()) assembly.state[k].assign(elements, 0.0f);
    std::memcpy(assembly.state[k].data() + *offset, tensor->data.data(), n * sizeof(float));
    if (k != 0) continue;
    for (size_t i = size_t(*offset); i < size_t(*offset) + n; ++i) {
      if (assembly.given[i]++ != 0) {
        return Damaged(path, "gives element " + std::to_string(i) + " of '" + *parameter +
                                 "' that another run gave already");
      }
    }
  }
  return Status::Ok();
}

// Reads one part into the assemblies.
Status AddPart(const std::string& path, int64_t step, int64_t world,
               const CheckpointState& checkpoint, std::map<std::string, Assembly>* assemblies,
               std::vector<std::string>* names) {
  Result<TorchValue> root = ReadTorchArchive(path);
  if (!root.ok()) return root.status().WithContext("reading checkpoint part " + path);
  DPL_RETURN_IF_ERROR(CheckHeader(*root, kPartFormat, step, world, path));
  const TorchValue* runs = root->Find("runs");
  if (runs == nullptr || runs->AsList() == nullptr) return Damaged(path, "has no list 'runs'");
  for (const TorchValue& run : *runs->AsList()) {
    DPL_RETURN_IF_ERROR(AddRun(run, path, checkpoint, assemblies, names));
  }
  return Status::Ok();
}

TorchTensor FloatTensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  TorchTensor tensor;
  tensor.dtype = TorchDtype::kFloat32;
  tensor.shape = std::move(shape);
  tensor.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(tensor.data.data(), values.data(), tensor.data.size());
  return tensor;
}

// The manifest's part names, each a plain file name of the folder.
Result<std::vector<std::string>> PartNames(const TorchValue& manifest, int64_t world,
                                           const std::string& path) {
  const TorchValue* parts = manifest.Find("parts");
  if (parts == nullptr || parts->AsList() == nullptr || int64_t(parts->AsList()->size()) != world) {
    return Damaged(path,
                   "does not list one part for each of its " + std::to_string(world) + " ranks");
  }
  std::vector<std::string> names;
  for (const TorchValue& part : *parts->AsList()) {
    const std::string* name = part.AsString();
    if (name == nullptr || name->empty() || name->find('/') != std::string::npos) {
      return Damaged(path, "lists a part that is not a file name of its folder");
    }
    names.push_back(*name);
  }
  return names;
}

// Waits until every rank's part is in `staging`; the ranks whose part is missing otherwise.
Status WaitForParts(const std::string& staging, int world_size, const std::atomic<bool>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + kCheckpointPartsWait;
  std::vector<int> missing;
  for (int rank = 0; rank < world_size; ++rank) missing.push_back(rank);
  while (true) {
    std::vector<int> still;
    for (int rank : missing) {
      const std::string part = staging + "/" + OptimizerPartName(rank, world_size);
      if (::access(part.c_str(), F_OK) != 0) still.push_back(rank);
    }
    missing = std::move(still);
    if (missing.empty()) return Status::Ok();
    if (stop.load()) {
      return Status::Error("the checkpoint in " + staging + " was abandoned: the run ended first");
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string ranks;
      for (int rank : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
      return Status::Io(
          "the parts of rank(s) " + ranks + " did not appear in " + staging + " within " +
          std::to_string(kCheckpointPartsWait.count()) +
          " min: with --shard-optimizer on every rank writes its part of a checkpoint into "
          "--checkpoint-dir, which must be one folder that every machine reaches (a shared file "
          "system), given to every machine");
    }
    std::this_thread::sleep_for(kPartPoll);
  }
}

}  // namespace

std::string CheckpointFolderName(int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%010lld", static_cast<long long>(global_step));
  return name;
}

std::string StagingFolderName(int64_t global_step) {
  return CheckpointFolderName(global_step) + kStagingSuffix;
}

std::string OptimizerPartName(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof name, "optimizer-%05d-of-%05d.pt", rank, world_size);
  return name;
}

bool IsFolder(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsCompleteCheckpointFolder(const std::string& path) {
  return ::access((path + "/" + kManifestFileName).c_str(), F_OK) == 0;
}

bool RemoveCheckpointFolder(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return errno == ENOENT;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") ::unlink((path + "/" + name).c_str());
  }
  ::closedir(dir);
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

Status WriteOptimizerPart(const std::string& directory, OptimizerPart part) {
  Result<std::string> staging = StagingFolder(directory, part.global_step);
  if (!staging.ok()) return staging.status();
  TorchValue::Items runs;
  for (OptimizerPartRun& run : part.runs) {
    TorchValue::Entries state;
    for (size_t k = 0; k < run.state.size() && k < part.state_names.size(); ++k) {
      state.emplace_back(part.state_names[k], TorchValue::Tensor(std::move(run.state[k])));
    }
    runs.push_back(TorchValue::Dict({{"parameter", TorchValue::String(run.parameter)},
                                     {"offset", TorchValue::Int(run.offset)},
                                     {"state", TorchValue::Dict(std::move(state))}}));
  }
  const TorchValue root = TorchValue::Dict({{"format", TorchValue::String(kPartFormat)},
                                            {"version", TorchValue::Int(kFolderFormatVersion)},
                                            {"global_step", TorchValue::Int(part.global_step)},
                                            {"rank", TorchValue::Int(part.rank)},
                                            {"world_size", TorchValue::Int(part.world_size)},
                                            {"runs", TorchValue::List(std::move(runs))}});
  return WriteTorchArchive(*staging + "/" + OptimizerPartName(part.rank, part.world_size), root,
                           "checkpoint");
}

Status WriteFolderState(const std::string& directory, CheckpointState state) {
  Result<std::string> staging = StagingFolder(directory, state.global_step);
  if (!staging.ok()) return staging.status();
  return WriteCheckpointFile(*staging + "/" + kFolderStateFileName, std::move(state));
}

Status CommitCheckpointFolder(const std::string& directory, int64_t global_step, int world_size,
                              const std::atomic<bool>& stop) {
  const std::string staging = directory + "/" + StagingFolderName(global_step);
  DPL_RETURN_IF_ERROR(WaitForParts(staging, world_size, stop));
  TorchValue::Items parts;
  for (int rank = 0; rank < world_size; ++rank) {
    parts.push_back(TorchValue::String(OptimizerPartName(rank, world_size)));
  }
  const TorchValue manifest = TorchValue::Dict({{"format", TorchValue::String(kManifestFormat)},
                                                {"version", TorchValue::Int(kFolderFormatVersion)},
                                                {"global_step", TorchValue::Int(global_step)},
                                                {"world_size", TorchValue::Int(world_size)},
                                                {"state", TorchValue::String(kFolderStateFileName)},
                                                {"parts", TorchValue::List(std::move(parts))}});
  DPL_RETURN_IF_ERROR(WriteTorchArchive(staging + "/" + kManifestFileName, manifest, "checkpoint"));
  const std::string folder = directory + "/" + CheckpointFolderName(global_step);
  if (!RemoveCheckpointFolder(folder)) {
    return Status::Io("removing " + folder +
                      ", an older checkpoint of the same step, failed: " + std::strerror(errno));
  }
  if (::rename(staging.c_str(), folder.c_str()) != 0) {
    return Status::Io("renaming " + staging + " to " + folder + " failed: " + std::strerror(errno));
  }
  return SyncFolder(directory);
}

Result<CheckpointState> ReadCheckpointFolder(const std::string& path) {
  const std::string manifest_path = path + "/" + kManifestFileName;
  Result<TorchValue> manifest = ReadTorchArchive(manifest_path);
  if (!manifest.ok()) {
    return manifest.status().WithContext("reading the manifest of checkpoint folder " + path);
  }
  Result<int64_t> step = IntField(*manifest, "global_step", manifest_path);
  Result<int64_t> world = IntField(*manifest, "world_size", manifest_path);
  Result<std::string> state_name = StringField(*manifest, "state", manifest_path);
  if (!step.ok()) return step.status();
  if (!world.ok()) return world.status();
  if (!state_name.ok()) return state_name.status();
  DPL_RETURN_IF_ERROR(CheckHeader(*manifest, kManifestFormat, *step, *world, manifest_path));
  Result<std::vector<std::string>> parts = PartNames(*manifest, *world, manifest_path);
  if (!parts.ok()) return parts.status();
  if (state_name->find('/') != std::string::npos) {
    return Damaged(manifest_path, "names a state file outside its folder");
  }
  Result<CheckpointState> state = ReadCheckpoint(path + "/" + *state_name);
  if (!state.ok()) return state.status();
  if (state->global_step != *step) return Damaged(path, "holds a state of another step");
  std::map<std::string, Assembly> assemblies;
  std::vector<std::string> names;
  for (const std::string& part : *parts) {
    DPL_RETURN_IF_ERROR(AddPart(path + "/" + part, *step, *world, *state, &assemblies, &names));
  }
  state->optimizer_state.clear();
  for (size_t k = 0; k < names.size(); ++k) {
    for (const NamedTensor& entry : state->model) {
      auto found = assemblies.find(entry.name);
      if (found == assemblies.end()) continue;
      const Assembly& assembly = found->second;
      for (size_t i = 0; i < assembly.given.size(); ++i) {
        if (assembly.given[i] == 0) {
          return Damaged(path, "has no optimizer state for element " + std::to_string(i) + " of '" +
                                   entry.name + "' in any part");
        }
      }
      if (assembly.state.size() <= k || assembly.state[k].empty()) {
        return Damaged(path, "has no '" + names[k] + "' state of '" + entry.name + "'");
      }
      state->optimizer_state.push_back(
          {entry.name, names[k], FloatTensor(assembly.state[k], assembly.shape)});
    }
  }
  return state;
}

Status RemoveStagingFolders(const std::string& directory) {
  Result<std::vector<CheckpointFile>> files = ListCheckpointFiles(directory);
  if (!files.ok()) return files.status();
  for (const CheckpointFile& file : *files) {
    if (file.folder && file.temporary && !RemoveCheckpointFolder(file.path)) {
      return Status::Io("removing " + file.path +
                        ", the unfinished checkpoint of an earlier run, " +
                        "failed: " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

}  // namespace dpl::training
