// Note [Checkpoint forms]: a checkpoint is one of two forms, each made of PyTorch's files
// (torch.load(path, weights_only=True) reads every one of them):
//
//   checkpoint-<step>.pt      one file (checkpoint.hpp) that rank 0 writes, the optimizer's state
//                             whole: gathered to rank 0 when it is sharded (--shard-optimizer
//                             auto on one machine gathers it through the machine's memory);
//   checkpoint-<step>/        with --shard-optimizer on, a folder the ranks write in parallel:
//     state.pt                rank 0's: the one file's dict, its optimizer "state" empty ({});
//     optimizer-<r>-of-<W>.pt rank r's part of the optimizer's state:
//                             {"format": "dpl-checkpoint-part", "version": 1, "global_step": G,
//                              "rank": r, "world_size": W,
//                              "runs": [{"parameter": name, "offset": first element,
//                                        "state": {"exp_avg": 1-D tensor, ...}}, ...]};
//     manifest.pt             written last, by rank 0 once every part is on disk:
//                             {"format": "dpl-checkpoint-manifest", "version": 1,
//                              "global_step": G, "world_size": W, "state": "state.pt",
//                              "parts": ["optimizer-00000-of-00002.pt", ...]}.
//
// The ranks write into checkpoint-<step>.tmp/ (each file atomically, as the one file is written);
// rank 0 waits for every part, writes the manifest, renames the folder to checkpoint-<step>/ and
// fsyncs --checkpoint-dir. A folder without its manifest is a temporary (a write that did not
// finish), removed by the retention as a killed writer's file is. A reader assembles each
// parameter's state whole from the runs of every part, so a folder resumes at any world size,
// sharded or not. Each rank writes only its own part: no gather of the optimizer's state through
// the backend, and the writes of the ranks (of the machines, on a shared file system) run at once.
// Where every machine holds each part (the shared-memory sums across machines) only machine 0's
// ranks write runs, the others' parts list none; a run written twice with the same bits (by
// earlier versions) reads once.
// --checkpoint-dir must then be one folder every machine reaches (it must already be for --resume
// on every machine); a part that does not come within kCheckpointPartsWait is an error that says
// so. Nothing of a staging folder is older than its run: rank 0 removes those of earlier runs
// before training starts (RemoveStagingFolders), before any rank of its run can reach a checkpoint
// (every rank's first step waits on rank 0 in the gradients' reduction).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/torch_files/torch_value.hpp"
#include "training/checkpoint.hpp"

namespace dpl::training {

inline constexpr const char* kStagingSuffix = ".tmp";
inline constexpr const char* kManifestFileName = "manifest.pt";
inline constexpr const char* kFolderStateFileName = "state.pt";
// How long rank 0 waits for the other ranks' parts once its own are written.
inline constexpr std::chrono::minutes kCheckpointPartsWait{5};

// "checkpoint-<step zero-padded to 10>", and that followed by kStagingSuffix while written.
std::string CheckpointFolderName(int64_t global_step);
std::string StagingFolderName(int64_t global_step);
// "optimizer-<rank>-of-<world size>.pt", both zero-padded to 5.
std::string OptimizerPartName(int rank, int world_size);

bool IsFolder(const std::string& path);
// A folder of parts with its manifest in it.
bool IsCompleteCheckpointFolder(const std::string& path);
// Removes a folder of parts and the files in it; false when something could not be removed.
bool RemoveCheckpointFolder(const std::string& path);

// One run of a rank's part: elements [offset, offset + n) of `parameter`, state k (the part's
// state_names[k]) as a float32 tensor of n elements.
struct OptimizerPartRun {
  std::string parameter;
  int64_t offset = 0;
  std::vector<torch_files::TorchTensor> state;
};

struct OptimizerPart {
  int64_t global_step = 0;
  int rank = 0;
  int world_size = 1;
  std::vector<std::string> state_names;
  std::vector<OptimizerPartRun> runs;
};

// Every rank: its part into `directory`'s staging folder of the part's step (created when missing).
Status WriteOptimizerPart(const std::string& directory, OptimizerPart part);
// Rank 0: `state` (its optimizer state left empty) into the staging folder of its step.
Status WriteFolderState(const std::string& directory, CheckpointState state);
// Rank 0, after its part and the state: waits for every rank's part (until kCheckpointPartsWait
// has passed, or `stop` is set), writes the manifest and renames the staging folder to
// CheckpointFolderName (replacing a folder of that step that a run before left).
Status CommitCheckpointFolder(const std::string& directory, int64_t global_step, int world_size,
                              const std::atomic<bool>& stop);
// Reads a complete folder: the state with the optimizer's state of every parameter assembled
// whole from the parts. Errors name the folder and the part: missing, of another step or world
// size, runs that overlap or leave elements out.
Result<CheckpointState> ReadCheckpointFolder(const std::string& path);
// Rank 0 before training: removes the staging folders earlier runs left in `directory`.
Status RemoveStagingFolders(const std::string& directory);

}  // namespace dpl::training
