// One worker's life once its rank-independent start-up is done (plugins loaded, data open): join
// the job through the store, start the backend, then run the selftest or the training.
#pragma once

#include "cli/options.hpp"
#include "plugin_host/plugin_host.hpp"
#include "training/data.hpp"
#include "training/model.hpp"

namespace dpl::worker {

// Returns the process exit code; a failure is logged as this rank's error first.
int RunWorkerSession(const cli::Options& options, Result<training::TrainingData> data,
                     Result<plugin_host::Discovery> discovery);

// The training side's view of a loaded model plugin.
training::ModelPlugin ModelPluginOf(const plugin_host::LoadedPlugin& plugin);

// Logs `status` as an error and returns the exit code it calls for: kPeerFailureExitCode (in
// worker.hpp) for a lost or silent peer, else 1.
int Fail(const Status& status);

}  // namespace dpl::worker
