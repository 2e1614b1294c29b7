// The host's own state dicts, for model plugins of ABI v1 and v2, whose save_state and load_state
// do not speak Python's format: the parameters by name as a torch.save file that Python's
// torch.load reads as {name: tensor} (written and read without libtorch, torch_archive.hpp).
// Plugins of ABI v3 export and import through their own save_state and load_state.
#pragma once

#include <string>

#include "common/status.hpp"
#include "training/placement.hpp"

namespace dpl::training {

// Writes every parameter's host values, under its name, to `path` (atomically).
Status WriteParameterStateDict(const std::string& path, const ParameterPlacement& placement);

// Reads `path` (a state dict, or a dpl checkpoint, whose "model" is one) into the host values;
// every parameter must be there with its shape, else the error names the first that is not.
Status ReadParameterStateDict(const std::string& path, ParameterPlacement& placement);

}  // namespace dpl::training
