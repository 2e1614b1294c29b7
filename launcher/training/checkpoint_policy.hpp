// When a run writes checkpoints and how it resumes from one: every --checkpoint-every steps and
// at the end (rank 0 writes, into --checkpoint-dir), and with --resume from the newest, which
// must have been written with the options that change the arithmetic (the fingerprint).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "training/config.hpp"
#include "training/optimizer.hpp"
#include "training/placement.hpp"

namespace dpl::training {

// Where training stands: the epoch to continue in, the batches of it already done, and the
// optimizer steps made in all.
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t global_step = 0;
};

class CheckpointPolicy {
 public:
  CheckpointPolicy(const TrainingConfig& config, int rank, int world_size);

  // With --resume, restores the newest checkpoint into the host values (the placement hands them
  // to the model) and the optimizer, and returns its position; else, or when there is none yet,
  // the start. Refuses a checkpoint written with other options, naming both.
  Result<TrainingPosition> Resume(ParameterPlacement& placement, Optimizer& optimizer) const;
  // Whether a checkpoint is due after the optimizer step that made `global_step` steps.
  bool DueAfter(int64_t global_step) const;
  // Writes one (on rank 0, when --checkpoint-dir is set; a no-op elsewhere).
  Status Save(const TrainingPosition& position, const ParameterPlacement& placement,
              Optimizer& optimizer) const;

 private:
  std::string Fingerprint() const;

  const TrainingConfig& config_;
  int rank_;
  int world_size_;
};

}  // namespace dpl::training
