// The check, before any worker starts, that the model can be created for the job's data.
#pragma once

#include "cli/options.hpp"
#include "common/status.hpp"
#include "plugin_host/plugin_host.hpp"
#include "training/data.hpp"

namespace dpl::worker {

// Creates the --model for `data` in a forked throw-away process and reports what the workers'
// own create would say (Note [Refused before the workers start] in model_probe.cpp). An error is
// the job's refusal; Ok means the workers may start, either because the model was created or
// because the check could not decide (then the workers find out themselves).
Status ProbeModelForData(const cli::Options& options, const plugin_host::Discovery& discovery,
                         const training::TrainingData& data);

}  // namespace dpl::worker
