// The trained model written for Python: --export at the end of a run and --export-best while it
// validates. A model with ModelCapability::kStateFiles writes its own form (a TorchScript module,
// or a state dict of its module's names); for older plugins the host writes a state dict of its
// parameters (state_dict.hpp). Either way the file appears whole or not at all.
#pragma once

#include <string>

#include "common/status.hpp"
#include "training/model.hpp"
#include "training/placement.hpp"

namespace dpl::training {

// Writes the model to `path`: to a temporary name in the same folder, then renamed (over the
// file a symbolic link names; a path that is not a regular file is refused, Note [Files a flag
// names]). Errors name the path.
Status ExportModel(Model& model, ParameterPlacement& placement, const std::string& path);

}  // namespace dpl::training
