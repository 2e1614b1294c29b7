#include "training/checkpoint.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "dpl/torch_files/torch_archive.hpp"
#include "training/checkpoint_folder.hpp"

namespace dpl::training {

using torch_files::ReadTorchArchive;
using torch_files::TorchDict;
using torch_files::TorchDictEntry;
using torch_files::TorchTensor;
using torch_files::TorchValue;
using torch_files::WriteTorchArchive;
namespace {

constexpr const char* kSuffix = ".pt";
constexpr const char* kOldSuffix = ".dplckpt";  // DPLCKPT1, before checkpoints were torch files
constexpr char kOldMagic[8] = {'D', 'P', 'L', 'C', 'K', 'P', 'T', '1'};

const int64_t* AsInt(const TorchValue& value) {
  return value.AsInt();
}
const TorchDict* AsDict(const TorchValue& value) {
  return value.AsDict();
}
const std::string* AsString(const TorchValue& value) {
  return value.AsString();
}
const TorchTensor* AsTensor(const TorchValue& value) {
  return value.AsTensor();
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() > suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status OldFormat(const std::string& path) {
  return Status::InvalidArgument(
      "checkpoint " + path +
      " is in dpl's old checkpoint format (DPLCKPT1), which this launcher no longer reads; "
      "resume it with the dpl version that wrote it, or start afresh with another "
      "--checkpoint-dir (checkpoints are now torch.save files Python can load)");
}

bool HasOldMagic(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char magic[sizeof kOldMagic] = {};
  return file.read(magic, sizeof magic) && std::memcmp(magic, kOldMagic, sizeof magic) == 0;
}

TorchValue Position(const CheckpointState& state) {
  return TorchValue::Dict({{"epoch", TorchValue::Int(state.epoch)},
                           {"step_in_epoch", TorchValue::Int(state.step_in_epoch)},
                           {"global_step", TorchValue::Int(state.global_step)}});
}

// Moves the state's optimizer tensors into the value (the rest of `state` stays).
TorchValue TakeOptimizer(CheckpointState& state) {
  TorchDict per_parameter;
  for (OptimizerStateTensor& entry : state.optimizer_state) {
    TorchValue* states = per_parameter.Find(entry.parameter);
    if (states == nullptr) {
      per_parameter.Set(entry.parameter, TorchValue::Dict());
      states = per_parameter.Find(entry.parameter);
    }
    states->AsDict()->Set(entry.state, TorchValue::Tensor(std::move(entry.tensor)));
  }
  state.optimizer_state.clear();
  return TorchValue::Dict({{"name", TorchValue::String(state.optimizer_name)},
                           {"steps", TorchValue::Int(state.optimizer_steps)},
                           {"state", TorchValue::FromDict(std::move(per_parameter))}});
}

TorchValue Scaler(const CheckpointState& state) {
  if (!state.scaler) return TorchValue::Dict();
  const ScalerCheckpoint& scaler = *state.scaler;
  return TorchValue::Dict({{"scale", TorchValue::Float(scaler.scale)},
                           {"growth_factor", TorchValue::Float(scaler.growth_factor)},
                           {"backoff_factor", TorchValue::Float(scaler.backoff_factor)},
                           {"growth_interval", TorchValue::Int(scaler.growth_interval)},
                           {"_growth_tracker", TorchValue::Int(scaler.growth_tracker)},
                           {"skipped_steps", TorchValue::Int(scaler.skipped_steps)}});
}

// Reads a field of `dict` as `access` (one of the As... accessors) gives it, or says what is
// wrong.
template <typename T, typename Access>
Result<const T*> Field(const TorchValue& dict, const std::string& key, Access access,
                       const std::string& path) {
  const TorchValue* value = dict.Find(key);
  const T* typed = value ? access(*value) : nullptr;
  if (typed == nullptr) {
    return Status::InvalidArgument("checkpoint " + path + " has no valid '" + key +
                                   "'; it was not written by dpl, or is damaged");
  }
  return typed;
}

Status ReadPosition(const TorchValue& root, const std::string& path, CheckpointState* state) {
  const TorchValue* position = root.Find("position");
  if (position == nullptr) return Field<int64_t>(root, "position", AsInt, path).status();
  for (auto [key, target] : {std::pair<const char*, int64_t*>{"epoch", &state->epoch},
                             {"step_in_epoch", &state->step_in_epoch},
                             {"global_step", &state->global_step}}) {
    DPL_ASSIGN_OR_RETURN(auto value, Field<int64_t>(*position, key, AsInt, path));
    *target = *value;
  }
  return Status::Ok();
}

Status ReadOptimizer(const TorchValue& root, const std::string& path, CheckpointState* state) {
  const TorchValue* optimizer = root.Find("optimizer");
  if (optimizer == nullptr) return Field<TorchDict>(root, "optimizer", AsDict, path).status();
  auto name = Field<std::string>(*optimizer, "name", AsString, path);
  auto steps = Field<int64_t>(*optimizer, "steps", AsInt, path);
  auto per_parameter = Field<TorchDict>(*optimizer, "state", AsDict, path);
  if (!name.ok()) return name.status();
  if (!steps.ok()) return steps.status();
  if (!per_parameter.ok()) return per_parameter.status();
  state->optimizer_name = **name;
  state->optimizer_steps = **steps;
  for (const TorchDictEntry& parameter : **per_parameter) {
    const std::string* parameter_name = std::get_if<std::string>(&parameter.key);
    const TorchDict* states = parameter.value.AsDict();
    if (parameter_name == nullptr || states == nullptr) {
      return Status::InvalidArgument("checkpoint " + path +
                                     " has optimizer state that is not keyed by parameter name");
    }
    for (const TorchDictEntry& entry : *states) {
      const std::string* state_name = std::get_if<std::string>(&entry.key);
      const TorchTensor* tensor = entry.value.AsTensor();
      if (state_name == nullptr || tensor == nullptr) {
        return Status::InvalidArgument("checkpoint " + path + " has optimizer state of '" +
                                       *parameter_name + "' that is not a tensor");
      }
      state->optimizer_state.push_back({*parameter_name, *state_name, *tensor});
    }
  }
  return Status::Ok();
}

const double* AsFloat(const TorchValue& value) {
  return value.AsFloat();
}

// Version 3's "scaler": {} or GradScaler's state dict with the skipped steps.
Status ReadScaler(const TorchValue& root, const std::string& path, CheckpointState* state) {
  DPL_ASSIGN_OR_RETURN(auto dict, Field<TorchDict>(root, "scaler", AsDict, path));
  if (dict->empty()) return Status::Ok();
  const TorchValue& scaler = *root.Find("scaler");
  ScalerCheckpoint read;
  for (auto [key, target] : {std::pair<const char*, double*>{"scale", &read.scale},
                             {"growth_factor", &read.growth_factor},
                             {"backoff_factor", &read.backoff_factor}}) {
    DPL_ASSIGN_OR_RETURN(auto value, Field<double>(scaler, key, AsFloat, path));
    *target = *value;
  }
  for (auto [key, target] :
       {std::pair<const char*, int64_t*>{"growth_interval", &read.growth_interval},
        {"_growth_tracker", &read.growth_tracker},
        {"skipped_steps", &read.skipped_steps}}) {
    DPL_ASSIGN_OR_RETURN(auto value, Field<int64_t>(scaler, key, AsInt, path));
    *target = *value;
  }
  state->scaler = read;
  return Status::Ok();
}

// The optional "validation" of runs that validate while training.
Status ReadValidation(const TorchValue& root, const std::string& path, CheckpointState* state) {
  if (root.Find("validation") == nullptr) return Status::Ok();
  DPL_RETURN_IF_ERROR(Field<TorchDict>(root, "validation", AsDict, path).status());
  const TorchValue& validation = *root.Find("validation");
  ValidationCheckpoint read;
  DPL_ASSIGN_OR_RETURN(auto best, Field<double>(validation, "best_loss", AsFloat, path));
  read.best_loss = *best;
  for (auto [key, target] : {std::pair<const char*, int64_t*>{"evaluations", &read.evaluations},
                             {"without_improvement", &read.without_improvement}}) {
    DPL_ASSIGN_OR_RETURN(auto value, Field<int64_t>(validation, key, AsInt, path));
    *target = *value;
  }
  state->validation = read;
  return Status::Ok();
}

Status ReadTensors(const TorchValue& root, const std::string& path, CheckpointState* state) {
  DPL_ASSIGN_OR_RETURN(auto model, Field<TorchDict>(root, "model", AsDict, path));
  for (const TorchDictEntry& entry : *model) {
    const std::string* name = std::get_if<std::string>(&entry.key);
    const TorchTensor* tensor = entry.value.AsTensor();
    if (name == nullptr || tensor == nullptr) {
      return Status::InvalidArgument("checkpoint " + path +
                                     "'s 'model' is not a state dict of named tensors");
    }
    state->model.push_back({*name, *tensor});
  }
  DPL_ASSIGN_OR_RETURN(auto rng, Field<TorchTensor>(root, "rng", AsTensor, path));
  state->rng_state = rng->data;
  DPL_ASSIGN_OR_RETURN(auto options, Field<TorchDict>(root, "options", AsDict, path));
  for (const TorchDictEntry& entry : *options) {
    const std::string* key = std::get_if<std::string>(&entry.key);
    const std::string* value = entry.value.AsString();
    if (key == nullptr || value == nullptr) {
      return Status::InvalidArgument("checkpoint " + path + "'s 'options' are not text");
    }
    state->options.emplace_back(*key, *value);
  }
  return Status::Ok();
}

// What a name in a checkpoint folder is: CheckpointFileName(step), that followed by ".tmp.<pid>",
// CheckpointFolderName(step) or StagingFolderName(step) (checkpoint_folder.hpp); step -1 for
// anything else.
struct NameKind {
  int64_t step = -1;
  bool temporary = false;
  bool folder = false;
};

NameKind KindOfName(const std::string& name) {
  constexpr size_t kPrefixLength = 11;  // "checkpoint-"
  if (name.rfind("checkpoint-", 0) != 0) return {};
  size_t end = kPrefixLength;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == kPrefixLength || end - kPrefixLength > 18) return {};
  const std::string rest = name.substr(end);
  const std::string temporary_mark = std::string(kSuffix) + ".tmp.";
  NameKind kind;
  kind.temporary = rest.rfind(temporary_mark, 0) == 0 && rest.size() > temporary_mark.size() &&
                   rest.find_first_not_of("0123456789", temporary_mark.size()) == std::string::npos;
  kind.folder = rest.empty() || rest == kStagingSuffix;
  if (rest == kStagingSuffix) kind.temporary = true;
  if (rest != kSuffix && !kind.temporary && !kind.folder) return {};
  kind.step = std::stoll(name.substr(kPrefixLength, end - kPrefixLength));
  return kind;
}

bool IsFolderEntry(const std::string& path, const dirent& entry) {
  if (entry.d_type == DT_DIR) return true;
  if (entry.d_type != DT_UNKNOWN && entry.d_type != DT_LNK) return false;
  return IsFolder(path);
}

// Removes a checkpoint or a temporary: a file, or a folder of parts with what is in it.
bool RemoveEntry(const CheckpointFile& file) {
  if (file.folder) return RemoveCheckpointFolder(file.path);
  return ::unlink(file.path.c_str()) == 0 || errno == ENOENT;
}

int64_t ModifiedNanoseconds(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
}

}  // namespace

std::string CheckpointFileName(int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%010lld%s", static_cast<long long>(global_step),
                kSuffix);
  return name;
}

Status WriteCheckpoint(const std::string& directory, CheckpointState state) {
  if (::mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Io("creating checkpoint folder " + directory +
                      " failed: " + std::strerror(errno));
  }
  const std::string path = directory + "/" + CheckpointFileName(state.global_step);
  return WriteCheckpointFile(path, std::move(state));
}

Status WriteCheckpointFile(const std::string& path, CheckpointState state) {
  TorchValue::Entries model, options;
  for (NamedTensor& entry : state.model) {
    model.emplace_back(entry.name, TorchValue::Tensor(std::move(entry.tensor)));
  }
  state.model.clear();
  for (const auto& [key, value] : state.options) {
    options.emplace_back(key, TorchValue::String(value));
  }
  TorchValue optimizer = TakeOptimizer(state);
  TorchValue::Entries root_entries = {
      {"format", TorchValue::String(kCheckpointFormat)},
      {"version", TorchValue::Int(kCheckpointVersion)},
      {"position", Position(state)},
      {"model", TorchValue::OrderedDict(std::move(model))},
      {"optimizer", std::move(optimizer)},
      {"rng", TorchValue::Tensor(
                  TorchTensor::Of<uint8_t>({int64_t(state.rng_state.size())}, state.rng_state))},
      {"scaler", Scaler(state)},
      {"options", TorchValue::Dict(std::move(options))}};
  if (state.validation) {
    const ValidationCheckpoint& validation = *state.validation;
    root_entries.emplace_back(
        "validation", TorchValue::Dict({{"best_loss", TorchValue::Float(validation.best_loss)},
                                        {"evaluations", TorchValue::Int(validation.evaluations)},
                                        {"without_improvement",
                                         TorchValue::Int(validation.without_improvement)}}));
  }
  const TorchValue root = TorchValue::Dict(std::move(root_entries));
  return WriteTorchArchive(path, root, "checkpoint");
}

Result<CheckpointState> ReadCheckpoint(const std::string& path) {
  if (IsFolder(path)) return ReadCheckpointFolder(path);
  if (HasOldMagic(path)) return OldFormat(path);
  Result<TorchValue> root = ReadTorchArchive(path);
  if (!root.ok()) return root.status().WithContext("reading checkpoint " + path);
  auto format = Field<std::string>(*root, "format", AsString, path);
  if (!format.ok() || **format != kCheckpointFormat) {
    return Status::InvalidArgument("checkpoint " + path +
                                   " is a torch file but not a dpl checkpoint (no 'format': '" +
                                   kCheckpointFormat + "')");
  }
  DPL_ASSIGN_OR_RETURN(auto version, Field<int64_t>(*root, "version", AsInt, path));
  if (*version < kOldestCheckpointVersion || *version > kCheckpointVersion) {
    return Status::InvalidArgument("checkpoint " + path + " has format version " +
                                   std::to_string(*version) + " but this launcher reads versions " +
                                   std::to_string(kOldestCheckpointVersion) + " to " +
                                   std::to_string(kCheckpointVersion));
  }
  CheckpointState state;
  DPL_RETURN_IF_ERROR(ReadPosition(*root, path, &state));
  DPL_RETURN_IF_ERROR(ReadOptimizer(*root, path, &state));
  DPL_RETURN_IF_ERROR(ReadTensors(*root, path, &state));
  if (*version >= 3) DPL_RETURN_IF_ERROR(ReadScaler(*root, path, &state));
  DPL_RETURN_IF_ERROR(ReadValidation(*root, path, &state));
  return state;
}

Result<std::string> NewestCheckpoint(const std::string& directory) {
  Result<std::vector<CheckpointFile>> files = ListCheckpointFiles(directory);
  if (!files.ok()) return files.status();
  const CheckpointFile* newest = nullptr;
  for (const CheckpointFile& file : *files) {
    if (file.temporary) continue;
    if (newest == nullptr || file.step > newest->step ||
        (file.step == newest->step &&
         ModifiedNanoseconds(file.path) > ModifiedNanoseconds(newest->path))) {
      newest = &file;
    }
  }
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return std::string();
  std::string newest_old;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind("checkpoint-", 0) == 0 && EndsWith(name, kOldSuffix) && name > newest_old) {
      newest_old = name;  // zero-padded steps sort as text
    }
  }
  ::closedir(dir);
  if (!newest_old.empty()) {
    const size_t digits = newest_old.find_first_not_of("0123456789", 11);
    const int64_t old_step = std::stoll("0" + newest_old.substr(11, digits - 11));
    if (newest == nullptr || old_step > newest->step) {
      return OldFormat(directory + "/" + newest_old);
    }
  }
  return newest == nullptr ? std::string() : newest->path;
}

Result<std::vector<CheckpointFile>> ListCheckpointFiles(const std::string& directory) {
  std::vector<CheckpointFile> files;
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) {
    if (errno == ENOENT) return files;
    return Status::Io("listing checkpoint folder " + directory +
                      " failed: " + std::strerror(errno));
  }
  while (const dirent* entry = ::readdir(dir)) {
    NameKind kind = KindOfName(entry->d_name);
    const std::string path = directory + "/" + entry->d_name;
    if (kind.step < 0 || kind.folder != IsFolderEntry(path, *entry)) continue;
    // A folder of parts is complete once its manifest is in it.
    if (kind.folder && !kind.temporary && !IsCompleteCheckpointFolder(path)) kind.temporary = true;
    files.push_back({path, kind.step, kind.temporary, kind.folder});
  }
  ::closedir(dir);
  std::sort(files.begin(), files.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return files;
}

Result<std::vector<std::string>> RemoveOlderCheckpoints(const std::string& directory,
                                                        int64_t written_step, int keep) {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  DPL_ASSIGN_OR_RETURN(std::vector<CheckpointFile> files, ListCheckpointFiles(directory));
  int64_t older_kept = 0;  // complete checkpoints older than written_step kept so far, newest first
  Status failed = Status::Ok();
  for (auto file = files.rbegin(); file != files.rend(); ++file) {
    if (file->step > written_step || (file->step == written_step && !file->temporary)) continue;
    if (!file->temporary && file->step < written_step && older_kept < keep - 1) {
      ++older_kept;
      continue;
    }
    if (RemoveEntry(*file)) {
      removed.push_back(file->path);
    } else if (failed.ok()) {
      failed = Status::Io("removing the old checkpoint " + file->path +
                          " failed: " + std::strerror(errno));
    }
  }
  if (!failed.ok()) return failed;
  return removed;
}

}  // namespace dpl::training
