// What a resume checks of the checkpoint it goes on from, beside its tensors: the options that
// must match, the training set's size, the learning-rate schedule's length; and what to say when
// the newest checkpoint cannot be read.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "training/checkpoint.hpp"
#include "training/config.hpp"

namespace dpl::training {

// The checkpoint's options entries that are no flag (Note [The training set of a resumed run],
// Note [A schedule drawn anew on resume] in resume_checks.cpp).
inline constexpr const char* kTrainingSamplesKey = "training samples";
inline constexpr const char* kScheduleStepsKey = "lr schedule steps";

// Refuses a checkpoint written with another value of a flag that must match on resume, naming it.
Status CheckResumedOptions(const CheckpointState& state, const TrainingConfig& config,
                           const std::string& path);
// Refuses a checkpoint of a training set of another size than `samples` (-1: not known).
Status CheckTrainingSamples(const CheckpointState& state, int64_t samples, const std::string& path);
// Whether the schedule's curve depends on the run's length (cosine, linear).
bool ScheduleDependsOnLength(const LrScheduleOptions& options);
// Warns where the checkpoint's schedule spanned another number of steps than `steps`.
void WarnOfARedrawnSchedule(const CheckpointState& state, const TrainingConfig& config,
                            int64_t steps, const std::string& path);
// "; to resume from the one before it, ... move NEWEST out of FOLDER", or "" when there is none.
std::string TheOneBefore(const std::string& folder, const std::string& newest);

}  // namespace dpl::training
