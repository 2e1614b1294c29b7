// The model instance a worker trains, created for the data it will be fed. The trainer creates it
// this way, and so does the machine's worker loader once, in a throw-away process, to refuse a
// model that cannot take the data before any worker starts (worker/model_probe.hpp).
#pragma once

#include <memory>

#include "common/status.hpp"
#include "training/data.hpp"
#include "training/model.hpp"
#include "training/worker_identity.hpp"

namespace dpl::training {

// Creates the model for `identity` (its device, threads and rank), tells a plugin with
// ModelCapability::kDataShape the data's sample shape and classes, and checks that the model takes
// the samples of every split of `data`; a misfit is an error naming both shapes.
Result<std::unique_ptr<Model>> CreateModelForData(const ModelPlugin& plugin,
                                                  const TrainingConfig& config,
                                                  const WorkerIdentity& identity,
                                                  const TrainingData& data);

}  // namespace dpl::training
