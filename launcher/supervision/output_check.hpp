// Note [Outputs checked first]: a run that cannot write what it produces must say so before it
// loads a plugin or trains a step, not after hours of training (and not restart to fail again):
// so before it starts a machine's workers, the launcher checks every file and folder that this
// machine's ranks will write -- the --log-dir files (every machine), the --dump-parameters folder
// (every machine, which must exist), the --metrics, --export and --export-best files and the
// --checkpoint-dir folder (machine 0, where rank 0 writes them; a missing last folder is created,
// as rank 0 would) -- by creating,
// writing and removing a small file in each folder, which finds a full disk or a read-only mount
// as well as a missing folder. A disk that fills during the run is found where it is written: the
// log files by the launcher (Supervisor::Line), the others by the worker that writes them.
#pragma once

#include "cli/options.hpp"
#include "common/status.hpp"

namespace dpl::supervision {

// Ok when machine `machine_id` can write every output of `options` it is responsible for; else
// the first that it cannot, naming the flag, the path and the reason (DPL_ERR_IO or
// DPL_ERR_INVALID_ARGUMENT). A run that `resumes` may find checkpoints in its folder; one that
// does not is refused there (Note [A fresh run and an earlier run's checkpoints]).
Status CheckOutputsWritable(const cli::Options& options, int machine_id, bool resumes);

}  // namespace dpl::supervision
