// Training checkpoints: parameters, optimizer state, sampler position and the options a resumed
// run must match, in one self-checking file (magic, version, CRC-32 trailer). Written atomically:
// a temporary file in the same folder, fsync, rename, fsync of the folder; so a crash mid-write
// leaves the previous checkpoint untouched. The host writes the parameter buffers itself, so
// checkpoints do not depend on a model plugin's save_state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::training {

inline constexpr char kCheckpointMagic[8] = {'D', 'P', 'L', 'C', 'K', 'P', 'T', '1'};
inline constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointState {
  int64_t global_step = 0;    // optimizer steps done
  int64_t epoch = 0;          // the epoch to continue in
  int64_t step_in_epoch = 0;  // batches of that epoch already done
  int64_t optimizer_steps = 0;
  std::string fingerprint;  // options that must match to resume, "k=v;k=v"
  std::vector<std::vector<float>> parameters;
  std::vector<std::vector<float>> optimizer_state;
};

// The file name for a step: "checkpoint-<step zero-padded to 10>.dplckpt".
std::string CheckpointFileName(int64_t global_step);

// Writes `state` to directory/CheckpointFileName(state.global_step) atomically (creates the
// directory). The error names the path and the failed system call.
Status WriteCheckpoint(const std::string& directory, const CheckpointState& state);

// Reads and verifies one checkpoint file. Errors name the path: not a checkpoint, truncated,
// checksum mismatch.
Result<CheckpointState> ReadCheckpoint(const std::string& path);

// The newest checkpoint in `directory` (by step), or "" when there is none.
Result<std::string> NewestCheckpoint(const std::string& directory);

}  // namespace dpl::training
