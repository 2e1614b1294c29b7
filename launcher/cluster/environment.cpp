#include "cluster/environment.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "cluster/environment_variables.hpp"
#include "cluster/remote_command.hpp"
#include "cluster/slurm_nodelist.hpp"

// Note [Slurm environment]
// - Only an srun step counts: SLURM_JOB_ID and SLURM_STEP_ID set. sbatch's batch script and
//   salloc's shell have SLURM_JOB_ID without a step id and run on one node only: the job's layout
//   would name machines where no launcher starts, so there the convention is none and the
//   description says how to start the launcher instead.
// - One launcher per node: it starts --num-processes workers itself. A step of more tasks than
//   nodes (SLURM_STEP_NUM_TASKS > SLURM_STEP_NUM_NODES) makes every task a launcher with its own
//   workers, and is refused: `srun --ntasks-per-node=1`. For the same reason SLURM_NTASKS_PER_NODE
//   is not the number of processes (it counts launchers, 1): processes_per_machine stays unset.
// - The step's values before the job's, as a step may run on part of the allocation (srun -N2 in
//   a 4-node job): num_machines = SLURM_STEP_NUM_NODES (else SLURM_JOB_NUM_NODES, SLURM_NNODES);
//   machine_id = SLURM_NODEID, the node's index in the step; the master is the first host of
//   SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, SLURM_NODELIST), the node whose SLURM_NODEID is
//   0.
// - MASTER_ADDR and MASTER_PORT, when set, win over the derived host and port (recipes for
//   PyTorch on Slurm export them in the batch script).
// - The job token is "slurm-<job id>.<step id>". Not a secret, job ids being public, but it keeps
//   out of the store the launchers of another job or of an earlier step that reach the same port
//   (Note [Slurm port]). No user id in it: job ids are already unique in a cluster, and a uid,
//   public too, would make it no more secret. A secret comes from --job-token or DPL_JOB_TOKEN.
//
// Note [Slurm port]
// port = 20000 + (job_id % 900) * 10 + step_id % 10, computed alike on every node of the step.
// Jobs less than 900 ids apart never share a port, nor do the first ten steps of a job, so a step
// started after a failed one does not meet its leftovers. 20000..28999 is unprivileged, below
// torch's 29500 (and torchrun's 29400), so PyTorch jobs sharing the node do not hold it, and below
// Linux's ephemeral range (32768..60999), where outgoing connections take their ports. A port
// taken anyway fails to bind with the port in the message; --master-port or MASTER_PORT moves it.

//
// Note [Slurm requeue]
// A job submitted with `sbatch --requeue` that Slurm requeues (`scontrol requeue`, a preemption
// with PreemptMode=REQUEUE, a node failure) runs its batch script again from the start, with the
// same job id and SLURM_RESTART_COUNT counting the runs before. Its launchers were sent SIGTERM
// first and wrote a checkpoint (Note [Preemption] in training/preemption.cpp); so a requeued job
// resumes from its newest checkpoint, as --resume does, when it writes checkpoints
// (--checkpoint-dir); a run without one starts over, as before. The first line says so.

namespace dpl::cluster {
namespace {

using namespace detail;

// Slurm job and step ids are 32-bit unsigned numbers.
constexpr int64_t kMaxSlurmId = 4294967295;

// The master's host and port of a Slurm step (Note [Slurm environment], Note [Slurm port]).
Status ReadSlurmMaster(const Variables& variables, const Found& nodes, const Found& job,
                       const Found& step, ClusterEnvironment* environment,
                       std::vector<std::string>* parts) {
  if (auto addr = ReadMasterAddr(variables)) {
    environment->master_addr = *addr;
    parts->push_back("master " + *addr + " (MASTER_ADDR)");
  } else {
    std::string list_name;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (variables.Has(name)) {
        list_name = name;
        break;
      }
    }
    if (list_name.empty()) {
      return Status::InvalidArgument(
          "Slurm step without SLURM_STEP_NODELIST (nor SLURM_JOB_NODELIST): the launcher cannot "
          "tell machine 0's host; set MASTER_ADDR");
    }
    const std::string list = *variables.Text(list_name);
    auto hosts = ExpandSlurmNodeList(list);
    if (!hosts.ok()) return hosts.status().WithContext(list_name);
    if (static_cast<int64_t>(hosts->size()) != nodes.value) {
      return Status::InvalidArgument(list_name + "='" + list + "' names " +
                                     std::to_string(hosts->size()) + " hosts but " + nodes.Show() +
                                     "; set MASTER_ADDR to machine 0's host");
    }
    environment->master_addr = hosts->front();
    parts->push_back("master " + hosts->front() + " (first of " + list_name + ")");
  }
  DPL_ASSIGN_OR_RETURN(auto port, ReadMasterPort(variables));
  if (port.has_value()) {
    environment->master_port = static_cast<int>(port->value);
    parts->push_back("port " + std::to_string(port->value) + " (MASTER_PORT)");
  } else {
    environment->master_port = SlurmStorePort(job.value, step.value);
    parts->push_back("port " + std::to_string(*environment->master_port) + " (from " + job.name +
                     " and " + step.name + ")");
  }
  return Status::Ok();
}

// Note [Slurm environment].
Result<ClusterEnvironment> ReadSlurm(const Variables& variables, const Found& job,
                                     const Found& step) {
  ClusterEnvironment environment;
  environment.convention = Convention::kSlurm;
  DPL_ASSIGN_OR_RETURN(auto nodes, variables.FirstNumber({"SLURM_STEP_NUM_NODES",
                                                          "SLURM_JOB_NUM_NODES", "SLURM_NNODES"},
                                                         1, kMaxCount));
  DPL_ASSIGN_OR_RETURN(
      auto tasks, variables.FirstNumber({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, 1,
                                        kMaxCount));
  DPL_ASSIGN_OR_RETURN(auto node_id, variables.Number("SLURM_NODEID", 0, kMaxCount - 1));
  if (!nodes.has_value() || !node_id.has_value()) {
    return Status::InvalidArgument(
        "Slurm step " + job.Show() + " " + step.Show() +
        " without SLURM_STEP_NUM_NODES or SLURM_NODEID: start the launcher with srun, which sets "
        "them");
  }
  const Found& node_count = *nodes;
  if (tasks.has_value() && tasks->value > node_count.value) {
    return Status::InvalidArgument(
        "the Slurm step runs " + std::to_string(tasks->value) + " tasks on " +
        std::to_string(node_count.value) + " nodes (" + tasks->Show() + ", " + node_count.Show() +
        "): every task would be a launcher starting its own workers. Start "
        "one launcher per node, `srun --ntasks-per-node=1 launcher ...`, and give the workers "
        "per node with --num-processes");
  }
  if (node_id->value >= node_count.value) {
    return Status::InvalidArgument(node_id->Show() + " is not below " + node_count.Show() +
                                   " in the environment");
  }
  environment.num_machines = static_cast<int>(node_count.value);
  environment.machine_id = static_cast<int>(node_id->value);
  std::vector<std::string> parts = {
      std::to_string(node_count.value) + " machines (" + node_count.name + ")",
      "machine " + std::to_string(node_id->value) + " (SLURM_NODEID)"};
  DPL_RETURN_IF_ERROR(ReadSlurmMaster(variables, node_count, job, step, &environment, &parts));
  environment.job_token = "slurm-" + std::to_string(job.value) + "." + std::to_string(step.value);
  parts.push_back("job token from " + job.name + " and " + step.name);
  DPL_ASSIGN_OR_RETURN(auto restarts, variables.Number("SLURM_RESTART_COUNT", 0, kMaxCount));
  if (restarts.has_value() && restarts->value > 0) {
    environment.requeued = true;  // Note [Slurm requeue]
    parts.push_back("requeued (" + restarts->Show() +
                    "): resumes from the newest checkpoint of --checkpoint-dir");
  }
  environment.description = "Slurm job " + std::to_string(job.value) + " step " +
                            std::to_string(step.value) + ": " + JoinParts(parts);
  return environment;
}

// What a batch script or salloc shell sees of its allocation. The node count and list are only
// described, never used, so a value that is not a number counts as not given.
SlurmAllocation ReadAllocation(const Variables& variables, int64_t job_id) {
  SlurmAllocation allocation;
  allocation.job_id = job_id;
  auto nodes = variables.FirstNumber({"SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, 1, kMaxCount);
  if (nodes.ok() && nodes->has_value()) allocation.nodes = (*nodes)->value;
  for (const char* name : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (auto list = variables.Text(name)) {
      allocation.node_list = *list;
      break;
    }
  }
  return allocation;
}

}  // namespace

std::string SlurmAllocationLine(const SlurmAllocation& allocation,
                                const std::vector<std::string>& command) {
  std::string srun = "srun --ntasks-per-node=1";
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& word = command[i];
    if (word == "--job-token" || word == "--job_token") {
      ++i;  // and its value
      continue;
    }
    if (word.rfind("--job-token=", 0) == 0 || word.rfind("--job_token=", 0) == 0) continue;
    srun += " " + ShellQuote(word);
  }
  const std::string nodes = std::to_string(allocation.nodes) + " nodes" +
                            (allocation.node_list.empty() ? "" : " (" + allocation.node_list + ")");
  return "Slurm job " + std::to_string(allocation.job_id) + " holds " + nodes +
         ", but this launcher runs outside a job step: it trains on this node alone. To train on "
         "every node, start one launcher per node: " +
         srun;
}

const char* ConventionName(Convention convention) {
  switch (convention) {
    case Convention::kNone:
      return "none";
    case Convention::kSlurm:
      return "slurm";
    case Convention::kTorchrun:
      return "torchrun/kubernetes";
  }
  return "unknown";
}

int SlurmStorePort(int64_t job_id, int64_t step_id) {
  return kSlurmPortBase + static_cast<int>(job_id % 900) * 10 + static_cast<int>(step_id % 10);
}

EnvironmentLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

Result<ClusterEnvironment> ReadClusterEnvironment(const EnvironmentLookup& lookup) {
  const Variables variables(lookup);
  DPL_ASSIGN_OR_RETURN(auto job,
                       variables.FirstNumber({"SLURM_JOB_ID", "SLURM_JOBID"}, 0, kMaxSlurmId));
  std::string outside_step;
  std::optional<SlurmAllocation> allocation;
  if (job.has_value()) {
    DPL_ASSIGN_OR_RETURN(auto step,
                         variables.FirstNumber({"SLURM_STEP_ID", "SLURM_STEPID"}, 0, kMaxSlurmId));
    if (step.has_value()) return ReadSlurm(variables, *job, *step);
    outside_step = "Slurm job " + std::to_string(job->value) +
                   " but no srun step (a batch script or salloc shell runs on one node): its "
                   "nodes are not used; start the launcher with `srun --ntasks-per-node=1` to "
                   "use them";
    allocation = ReadAllocation(variables, job->value);
  }
  Result<ClusterEnvironment> environment = ClusterEnvironment{};
  if (HasTorchrunVariables(variables)) {
    environment = ReadTorchrun(variables);
  } else {
    environment->description = outside_step;
  }
  if (environment.ok()) environment->allocation_outside_step = allocation;
  return environment;
}

Result<ClusterEnvironment> ReadClusterEnvironment(
    const std::map<std::string, std::string>& variables) {
  return ReadClusterEnvironment([&variables](const std::string& name) {
    const auto it = variables.find(name);
    return it == variables.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

}  // namespace dpl::cluster
