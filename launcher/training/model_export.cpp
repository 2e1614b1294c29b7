#include "training/model_export.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/output_file.hpp"
#include "training/state_dict.hpp"

namespace dpl::training {

Status ExportModel(Model& model, ParameterPlacement& placement, const std::string& named_path) {
  // Note [Files a flag names]: the file a symbolic link names, never a device or a pipe.
  DPL_ASSIGN_OR_RETURN(const std::string path, OutputFileOf(named_path));
  if (!model.Has(ModelCapability::kStateFiles)) {
    DPL_RETURN_IF_ERROR(placement.RefreshHostValues());
    return WriteParameterStateDict(path, placement);
  }
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  Status saved = model.SaveState(temporary);
  if (saved.ok() && std::rename(temporary.c_str(), path.c_str()) != 0) {
    saved =
        Status::Io("renaming " + temporary + " to " + path + " failed: " + std::strerror(errno));
  }
  if (!saved.ok()) std::remove(temporary.c_str());
  // The plugin names the file it wrote, this temporary (or its own beside it): say which export.
  return saved.ok() ? saved : saved.WithContext("exporting the model to " + path);
}

}  // namespace dpl::training
