// Training checkpoints that say what they hold, in PyTorch's own file format (torch.save of a
// dict, written without libtorch by torch_archive.hpp), so `torch.load(path)` in Python gives:
//
//   {"format": "dpl-checkpoint", "version": 2,
//    "position": {"epoch": E, "step_in_epoch": S, "global_step": G},  # the sampler position
//    "model": OrderedDict{name: tensor},   # parameters, then buffers: a state dict
//    "optimizer": {"name": "adadelta", "steps": N,
//                  "state": {parameter name: {"square_avg": tensor, ...}}},
//    "rng": tensor(uint8),                 # the model's random generators ([] when none)
//    "scaler": {"scale": S, "growth_factor": G, "backoff_factor": B, "growth_interval": I,
//               "_growth_tracker": T, "skipped_steps": K},  # fp16's loss scaler, else {}
//    "options": {name: value text},        # what a resumed run must match
//    "validation": {"best_loss": L, "evaluations": N, "without_improvement": K}}
//                                          # only in runs that validate (--eval-every)
//
// "scaler" is GradScaler.state_dict() (torch.cuda.amp.GradScaler.load_state_dict takes it) plus
// the optimizer steps it skipped. It came with version 3; version 2 files, which have none, are
// still read.
//
// Written atomically (a temporary file in the same folder, fsync, rename, fsync of the folder),
// so a crash mid-write leaves the previous checkpoint untouched. Files of the old format
// (DPLCKPT1, *.dplckpt) are refused with what to do. A run with --shard-optimizer on writes the
// same state as a folder of parts instead (checkpoint_folder.hpp); what reads, lists and removes
// checkpoints here takes both forms.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "dpl/torch_files/torch_value.hpp"

namespace dpl::training {

inline constexpr const char* kCheckpointFormat = "dpl-checkpoint";
inline constexpr int64_t kCheckpointVersion = 3;
inline constexpr int64_t kOldestCheckpointVersion = 2;  // the oldest this launcher reads

struct NamedTensor {
  std::string name;
  torch_files::TorchTensor tensor;
};

// One tensor of the optimizer's state: `state` ("exp_avg", ...) of parameter `parameter`.
struct OptimizerStateTensor {
  std::string parameter;
  std::string state;
  torch_files::TorchTensor tensor;
};

// An fp16 run's loss scaler (GradScaler's state dict) and the steps it skipped.
struct ScalerCheckpoint {
  double scale = 0.0;
  double growth_factor = 0.0;
  double backoff_factor = 0.0;
  int64_t growth_interval = 0;
  int64_t growth_tracker = 0;
  int64_t skipped_steps = 0;
};

// Validation while training (--eval-every): the lowest validation loss so far (inf before the
// first evaluation), the evaluations made and those since the loss last improved.
struct ValidationCheckpoint {
  double best_loss = 0.0;
  int64_t evaluations = 0;
  int64_t without_improvement = 0;
};

struct CheckpointState {
  int64_t epoch = 0;          // the epoch to continue in
  int64_t step_in_epoch = 0;  // batches of that epoch already done
  int64_t global_step = 0;    // optimizer steps done
  std::vector<NamedTensor> model;
  std::string optimizer_name;
  int64_t optimizer_steps = 0;
  std::vector<OptimizerStateTensor> optimizer_state;
  std::vector<uint8_t> rng_state;
  std::optional<ScalerCheckpoint> scaler;          // none but for fp16
  std::optional<ValidationCheckpoint> validation;  // none in runs that do not validate
  std::vector<std::pair<std::string, std::string>> options;
};

// The file name for a step: "checkpoint-<step zero-padded to 10>.pt".
std::string CheckpointFileName(int64_t global_step);

// Writes `state` to directory/CheckpointFileName(state.global_step) atomically (creates the
// directory). The error names the path and the failed system call. Takes the state by value:
// its tensors move into the file's pickle instead of being copied once more.
Status WriteCheckpoint(const std::string& directory, CheckpointState state);
// The same file at `path` (its folder must exist).
Status WriteCheckpointFile(const std::string& path, CheckpointState state);

// Reads and checks one checkpoint, a file or a folder of parts. Errors name the path: not a
// checkpoint, truncated, corrupt, the old format, a part missing.
Result<CheckpointState> ReadCheckpoint(const std::string& path);

// The newest complete checkpoint in `directory` (by step; of one step written in both forms, the
// later written), or "" when there is none. A newer file of the old format is refused.
Result<std::string> NewestCheckpoint(const std::string& directory);

// An entry of a checkpoint folder: a checkpoint (a file, or a folder of parts with its manifest),
// or the temporary of a write that did not finish (CheckpointFileName + ".tmp.<pid>", left by a
// writer that was killed; a folder of parts without its manifest).
struct CheckpointFile {
  std::string path;
  int64_t step = 0;
  bool temporary = false;
  bool folder = false;  // a folder of parts (checkpoint_folder.hpp)
};

// The checkpoints and temporaries in `directory`, by step (none when it does not exist).
Result<std::vector<CheckpointFile>> ListCheckpointFiles(const std::string& directory);

// Note [Checkpoint retention] (checkpoint_policy.hpp), after the checkpoint of `written_step` is
// complete on disk: removes the checkpoints older than it but the newest keep - 1 of them, and
// the temporaries of steps up to it; keep 0 removes nothing. Returns the paths removed; an error
// names the file that could not be removed (the others are still tried).
Result<std::vector<std::string>> RemoveOlderCheckpoints(const std::string& directory,
                                                        int64_t written_step, int keep);

}  // namespace dpl::training
