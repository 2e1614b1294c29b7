// What a cluster's environment says about the job: Slurm (inside an srun step) or the torchrun /
// Kubernetes variables (MASTER_ADDR, WORLD_SIZE, RANK, ..., as torchrun and Kubeflow's PyTorchJob
// set them). Only reads: precedence (flags win) is the caller's, so every value is optional and
// "not given" stays distinguishable from a value. Rules: Note [Slurm environment] and
// Note [torchrun and Kubernetes environment] in torchrun_environment.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace dpl::cluster {

enum class Convention {
  kNone,      // nothing recognised; description may still say why (a Slurm job outside srun)
  kSlurm,     // an srun step: SLURM_JOB_ID and SLURM_STEP_ID set
  kTorchrun,  // MASTER_ADDR, WORLD_SIZE, RANK, NODE_RANK, PET_* ... (torchrun, Kubeflow)
};

// "none", "slurm", "torchrun/kubernetes".
const char* ConventionName(Convention convention);

// A Slurm allocation seen outside a job step (a batch script, an salloc shell): the launcher runs
// on this node alone, whatever the allocation holds (Note [Slurm environment]).
struct SlurmAllocation {
  int64_t job_id = 0;
  int64_t nodes = 0;      // SLURM_JOB_NUM_NODES (or SLURM_NNODES); 0 when not given
  std::string node_list;  // SLURM_JOB_NODELIST (or SLURM_NODELIST) as given; may be ""
};

struct ClusterEnvironment {
  Convention convention = Convention::kNone;
  std::optional<int> num_machines;           // for --num-machines (the most, if elastic)
  std::optional<int> min_machines;           // set for an elastic range: --num-machines MIN:MAX
  std::optional<int> machine_id;             // for --machine-id, below num_machines when both set
  std::optional<std::string> master_addr;    // for --master-addr
  std::optional<int> master_port;            // for --master-port, 0..65535
  std::optional<std::string> job_token;      // for --job-token
  std::optional<int> processes_per_machine;  // for --num-processes
  // A Slurm job that was requeued (SLURM_RESTART_COUNT above 0): it resumes from its newest
  // checkpoint, when it writes checkpoints (Note [Slurm requeue] in environment.cpp).
  bool requeued = false;
  // One line saying what was taken from which variable, e.g. "Slurm job 42 step 0: 2 machines
  // (SLURM_STEP_NUM_NODES), machine 1 (SLURM_NODEID), ..."; empty when there is nothing to say.
  std::string description;
  // Set when SLURM_JOB_ID is and no step id is, whatever convention the rest reads.
  std::optional<SlurmAllocation> allocation_outside_step;
};

// The value of an environment variable, or nothing when it is unset. A variable set to "" counts
// as unset (a template that left it blank, `export X=`), as for MASTER_ADDR before.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads the environment through `lookup`. Errors name the variable and its value: a value that
// is not a number, values that contradict each other (RANK >= WORLD_SIZE), or a layout dpl
// cannot run (several Slurm tasks per node, a launcher started by torchrun).
Result<ClusterEnvironment> ReadClusterEnvironment(const EnvironmentLookup& lookup);
Result<ClusterEnvironment> ReadClusterEnvironment(
    const std::map<std::string, std::string>& variables);

// The launcher's first line in an allocation of several nodes outside a job step: the allocation,
// and the command that starts one launcher per node with the user's own command line `command`
// (the program, then its arguments; a --job-token value is left out: a step makes its own).
std::string SlurmAllocationLine(const SlurmAllocation& allocation,
                                const std::vector<std::string>& command);

// The process's own environment (getenv), for the launcher.
EnvironmentLookup ProcessEnvironment();

// The port of a Slurm step's store, the same on every node of the step:
// kSlurmPortBase + (job_id % 900) * 10 + step_id % 10, in [20000, 28999]. See Note [Slurm port].
inline constexpr int kSlurmPortBase = 20000;
int SlurmStorePort(int64_t job_id, int64_t step_id);

}  // namespace dpl::cluster
