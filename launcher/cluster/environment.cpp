#include "cluster/environment.hpp"

#include <cstdlib>
#include <vector>

#include "cluster/decimal.hpp"
#include "cluster/slurm_nodelist.hpp"
#include "cluster/torchrun_flags.hpp"

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
// Note [torchrun and Kubernetes environment]
// What sets these variables:
// - torchrun gives each worker WORLD_SIZE (processes), RANK (the process's), GROUP_RANK (the
//   node's), LOCAL_WORLD_SIZE (processes on the node), MASTER_ADDR, MASTER_PORT and
//   TORCHELASTIC_RUN_ID, and reads PET_<FLAG> as its flags' defaults (PET_NNODES, ...).
// - Kubeflow's PyTorchJob (training-operator, pkg/controller.v1/pytorch/envvar.go) gives each pod
//   MASTER_ADDR (the master's service), MASTER_PORT, RANK = the pod's index (master 0, worker i
//   i + 1) and WORLD_SIZE: up to v1.6 the number of pods; from v1.7 pods x nprocPerNode when that
//   is a number (its default "auto" counts as 1), along with PET_NPROC_PER_NODE, PET_NODE_RANK =
//   RANK and PET_NNODES = pods (MIN:MAX under an elasticPolicy).
// So WORLD_SIZE counts machines or processes, and RANK is a machine's index (Kubeflow) or a
// process's (torchrun). The rules:
// - P, processes per machine: PET_NPROC_PER_NODE when a number, else LOCAL_WORLD_SIZE (both set:
//   they must agree). PET_NPROC_PER_NODE=auto|cpu|gpu leaves P unknown.
// - P known: WORLD_SIZE counts processes, num_machines = WORLD_SIZE / P. P unknown: WORLD_SIZE
//   counts machines. PET_NNODES (N) gives it too, and must agree. PET_NNODES=MIN:MAX (an
//   elasticPolicy) makes the job elastic; a count from WORLD_SIZE must then lie in the range.
// - machine_id: PET_NODE_RANK, NODE_RANK or GROUP_RANK (all set must agree). RANK must then be
//   below WORLD_SIZE and be that index (Kubeflow), or with P known one of the machine's process
//   ranks index*P .. index*P+P-1 (torchrun). Without them RANK alone is the index when P is
//   unknown, and with P known a process rank: the machine is RANK / P, RANK being its first
//   process (any other is ambiguous: set NODE_RANK).
// - master: MASTER_ADDR and MASTER_PORT, else PET_RDZV_ENDPOINT (Kubeflow's elastic jobs).
// - A launcher started by torchrun (TORCHELASTIC_RUN_ID set) is refused: torchrun starts
//   LOCAL_WORLD_SIZE launchers per machine, each with its own workers, and its default (static)
//   rendezvous already serves its own store on MASTER_PORT of machine 0
//   (TORCHELASTIC_USE_AGENT_STORE). The launcher takes torchrun's flags itself.
// - No job token: neither sets a secret.

namespace dpl::cluster {
namespace {

constexpr int64_t kMaxCount = 1 << 20;  // far above any job; the command line holds its limits
constexpr int kMaxPort = 65535;

// A variable that was set, with its value as a number.
struct Found {
  std::string name;
  int64_t value = 0;
  std::string Show() const { return name + "=" + std::to_string(value); }
};

class Variables {
 public:
  explicit Variables(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> Text(const std::string& name) const {
    std::optional<std::string> value = lookup_(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  }
  bool Has(const std::string& name) const { return Text(name).has_value(); }

  // `name` as a whole number in [min, max]; nothing when unset.
  Result<std::optional<Found>> Number(const std::string& name, int64_t min, int64_t max) const {
    const std::optional<std::string> text = Text(name);
    if (!text) return std::optional<Found>();
    const auto value = ParseDecimal(*text, max);
    if (!value || *value < min) {
      return Status::InvalidArgument(name + "='" + *text + "' in the environment is not a whole " +
                                     "number from " + std::to_string(min) + " to " +
                                     std::to_string(max));
    }
    return std::optional<Found>(Found{name, *value});
  }

  // The first of `names` that is set.
  Result<std::optional<Found>> FirstNumber(const std::vector<std::string>& names, int64_t min,
                                           int64_t max) const {
    for (const std::string& name : names) {
      auto found = Number(name, min, max);
      if (!found.ok() || found->has_value()) return found;
    }
    return std::optional<Found>();
  }

  // Every one of `names` that is set; they must all have the same value.
  Result<std::optional<Found>> AgreeingNumber(const std::vector<std::string>& names, int64_t min,
                                              int64_t max, const std::string& what) const {
    std::optional<Found> first;
    for (const std::string& name : names) {
      auto found = Number(name, min, max);
      if (!found.ok()) return found.status();
      if (!found->has_value()) continue;
      if (first && first->value != (*found)->value) {
        return Status::InvalidArgument(first->Show() + " and " + (*found)->Show() +
                                       " in the environment disagree about " + what +
                                       "; unset one or make them equal");
      }
      if (!first) first = *found;
    }
    return first;
  }

 private:
  const EnvironmentLookup& lookup_;
};

std::string JoinParts(const std::vector<std::string>& parts) {
  std::string line;
  for (const std::string& part : parts) line += (line.empty() ? "" : ", ") + part;
  return line;
}

// Slurm job and step ids are 32-bit unsigned numbers.
constexpr int64_t kMaxSlurmId = 4294967295;

std::optional<std::string> ReadMasterAddr(const Variables& variables) {
  return variables.Text("MASTER_ADDR");
}

Result<std::optional<Found>> ReadMasterPort(const Variables& variables) {
  return variables.Number("MASTER_PORT", 0, kMaxPort);
}

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
  auto port = ReadMasterPort(variables);
  if (!port.ok()) return port.status();
  if (port->has_value()) {
    environment->master_port = static_cast<int>((*port)->value);
    parts->push_back("port " + std::to_string((*port)->value) + " (MASTER_PORT)");
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
  auto nodes = variables.FirstNumber(
      {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"}, 1, kMaxCount);
  if (!nodes.ok()) return nodes.status();
  auto tasks =
      variables.FirstNumber({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, 1, kMaxCount);
  if (!tasks.ok()) return tasks.status();
  auto node_id = variables.Number("SLURM_NODEID", 0, kMaxCount - 1);
  if (!node_id.ok()) return node_id.status();
  if (!nodes->has_value() || !node_id->has_value()) {
    return Status::InvalidArgument(
        "Slurm step " + job.Show() + " " + step.Show() +
        " without SLURM_STEP_NUM_NODES or SLURM_NODEID: start the launcher with srun, which sets "
        "them");
  }
  const Found& node_count = **nodes;
  if (tasks->has_value() && (*tasks)->value > node_count.value) {
    return Status::InvalidArgument(
        "the Slurm step runs " + std::to_string((*tasks)->value) + " tasks on " +
        std::to_string(node_count.value) + " nodes (" + (*tasks)->Show() + ", " +
        node_count.Show() +
        "): every task would be a launcher starting its own workers. Start "
        "one launcher per node, `srun --ntasks-per-node=1 launcher ...`, and give the workers "
        "per node with --num-processes");
  }
  if ((*node_id)->value >= node_count.value) {
    return Status::InvalidArgument((*node_id)->Show() + " is not below " + node_count.Show() +
                                   " in the environment");
  }
  environment.num_machines = static_cast<int>(node_count.value);
  environment.machine_id = static_cast<int>((*node_id)->value);
  std::vector<std::string> parts = {
      std::to_string(node_count.value) + " machines (" + node_count.name + ")",
      "machine " + std::to_string((*node_id)->value) + " (SLURM_NODEID)"};
  DPL_RETURN_IF_ERROR(ReadSlurmMaster(variables, node_count, job, step, &environment, &parts));
  environment.job_token = "slurm-" + std::to_string(job.value) + "." + std::to_string(step.value);
  parts.push_back("job token from " + job.name + " and " + step.name);
  environment.description = "Slurm job " + std::to_string(job.value) + " step " +
                            std::to_string(step.value) + ": " + JoinParts(parts);
  return environment;
}

// What torchrun and Kubeflow say of the job's shape (Note [torchrun and Kubernetes environment]).
struct TorchrunShape {
  std::optional<Found> processes;       // P, processes per machine
  std::optional<Found> world;           // WORLD_SIZE
  std::optional<int64_t> machines;      // the number, or the most of an elastic range
  std::optional<int64_t> min_machines;  // the least of an elastic range (PET_NNODES=MIN:MAX)
  std::string machines_source;          // "WORLD_SIZE=8 / LOCAL_WORLD_SIZE=4", "PET_NNODES", ...
};

Status ReadProcessesPerMachine(const Variables& variables, TorchrunShape* shape,
                               std::vector<std::string>* parts) {
  std::optional<Found> from_operator;
  if (auto text = variables.Text("PET_NPROC_PER_NODE")) {
    auto processes = ParseProcessesPerNode(*text);
    if (!processes.ok()) return processes.status().WithContext("PET_NPROC_PER_NODE");
    if (processes->kind == ProcessesPerNode::Kind::kCount) {
      from_operator = Found{"PET_NPROC_PER_NODE", processes->count};
    } else {
      parts->push_back("PET_NPROC_PER_NODE=" + *text + " left to --num-processes");
    }
  }
  auto local = variables.Number("LOCAL_WORLD_SIZE", 1, kMaxCount);
  if (!local.ok()) return local.status();
  if (from_operator && local->has_value() && from_operator->value != (*local)->value) {
    return Status::InvalidArgument(from_operator->Show() + " and " + (*local)->Show() +
                                   " in the environment disagree about the processes per "
                                   "machine; unset one or make them equal");
  }
  shape->processes = from_operator ? from_operator : *local;
  return Status::Ok();
}

Status ReadMachineCount(const Variables& variables, TorchrunShape* shape) {
  auto world = variables.Number("WORLD_SIZE", 1, kMaxCount);
  if (!world.ok()) return world.status();
  shape->world = *world;
  if (shape->world && shape->processes) {
    if (shape->world->value % shape->processes->value != 0) {
      return Status::InvalidArgument(
          shape->world->Show() + " is not a multiple of " + shape->processes->Show() +
          " in the environment: with the processes per machine known, WORLD_SIZE counts "
          "processes (machines x processes per machine)");
    }
    shape->machines = shape->world->value / shape->processes->value;
    shape->machines_source = shape->world->Show() + " / " + shape->processes->Show();
  } else if (shape->world) {
    shape->machines = shape->world->value;
    shape->machines_source = "WORLD_SIZE";
  }
  const std::optional<std::string> nodes_text = variables.Text("PET_NNODES");
  if (!nodes_text) return Status::Ok();
  auto nodes = ParseNodeRange(*nodes_text);
  if (!nodes.ok()) return nodes.status().WithContext("PET_NNODES");
  if (nodes->min != nodes->max) {
    if (shape->machines && (*shape->machines < nodes->min || *shape->machines > nodes->max)) {
      return Status::InvalidArgument(
          "PET_NNODES=" + *nodes_text + " in the environment allows " + std::to_string(nodes->min) +
          " to " + std::to_string(nodes->max) + " machines but " + shape->machines_source +
          " says " + std::to_string(*shape->machines));
    }
    shape->min_machines = nodes->min;
    shape->machines = nodes->max;
    shape->machines_source = "PET_NNODES";
    return Status::Ok();
  }
  if (shape->machines && *shape->machines != nodes->min) {
    return Status::InvalidArgument(
        "PET_NNODES=" + *nodes_text + " in the environment says " + std::to_string(nodes->min) +
        " machines but " + shape->machines_source + " says " + std::to_string(*shape->machines));
  }
  if (!shape->machines) {
    shape->machines = nodes->min;
    shape->machines_source = "PET_NNODES";
  }
  return Status::Ok();
}

// RANK beside an explicit machine index: that index (Kubeflow) or one of its process ranks.
Status CheckRankAgainstIndex(const Found& rank, const Found& index, const TorchrunShape& shape) {
  if (rank.value == index.value) return Status::Ok();
  if (!shape.processes) {
    return Status::InvalidArgument(
        rank.Show() + " and " + index.Show() +
        " in the environment disagree about this machine's index (without LOCAL_WORLD_SIZE or "
        "PET_NPROC_PER_NODE, RANK counts machines); unset one or make them equal");
  }
  const int64_t first = index.value * shape.processes->value;
  const int64_t last = first + shape.processes->value - 1;
  if (rank.value >= first && rank.value <= last) return Status::Ok();
  return Status::InvalidArgument(rank.Show() + " in the environment is neither this machine's " +
                                 "index (" + index.Show() + ") nor one of its process ranks (" +
                                 std::to_string(first) + ".." + std::to_string(last) + " with " +
                                 shape.processes->Show() + ")");
}

Status ReadMachineIndex(const Variables& variables, const TorchrunShape& shape,
                        ClusterEnvironment* environment, std::vector<std::string>* parts) {
  auto index = variables.AgreeingNumber({"PET_NODE_RANK", "NODE_RANK", "GROUP_RANK"}, 0,
                                        kMaxCount - 1, "this machine's index");
  if (!index.ok()) return index.status();
  auto rank = variables.Number("RANK", 0, kMaxCount - 1);
  if (!rank.ok()) return rank.status();
  if (rank->has_value() && shape.world && (*rank)->value >= shape.world->value) {
    return Status::InvalidArgument((*rank)->Show() + " is not below " + shape.world->Show() +
                                   " in the environment");
  }
  int64_t machine = 0;
  std::string source;
  if (index->has_value()) {
    if (rank->has_value()) DPL_RETURN_IF_ERROR(CheckRankAgainstIndex(**rank, **index, shape));
    machine = (*index)->value;
    source = (*index)->name;
  } else if (rank->has_value() && shape.processes) {
    if ((*rank)->value % shape.processes->value != 0) {
      return Status::InvalidArgument(
          (*rank)->Show() + " in the environment is a process rank (WORLD_SIZE counts processes, " +
          shape.processes->Show() +
          ") but not the first of a machine; set NODE_RANK to this "
          "machine's index");
    }
    machine = (*rank)->value / shape.processes->value;
    source = (*rank)->Show() + " / " + shape.processes->Show();
  } else if (rank->has_value()) {
    machine = (*rank)->value;
    source = "RANK";
  } else {
    return Status::Ok();
  }
  if (shape.machines && machine >= *shape.machines) {
    return Status::InvalidArgument("machine index " + std::to_string(machine) + " (" + source +
                                   ") is not below the " + std::to_string(*shape.machines) +
                                   " machines of " + shape.machines_source + " in the environment");
  }
  environment->machine_id = static_cast<int>(machine);
  parts->push_back("machine " + std::to_string(machine) + " (" + source + ")");
  return Status::Ok();
}

Status ReadTorchrunMaster(const Variables& variables, ClusterEnvironment* environment,
                          std::vector<std::string>* parts) {
  std::string addr_source = "MASTER_ADDR";
  std::string port_source = "MASTER_PORT";
  environment->master_addr = ReadMasterAddr(variables);
  auto port = ReadMasterPort(variables);
  if (!port.ok()) return port.status();
  if (port->has_value()) environment->master_port = static_cast<int>((*port)->value);
  const std::optional<std::string> rendezvous = variables.Text("PET_RDZV_ENDPOINT");
  if (rendezvous && (!environment->master_addr || !environment->master_port)) {
    auto endpoint = ParseEndpoint(*rendezvous, 0);
    if (!endpoint.ok()) return endpoint.status().WithContext("PET_RDZV_ENDPOINT");
    if (!environment->master_addr) {
      environment->master_addr = endpoint->host;
      addr_source = "PET_RDZV_ENDPOINT";
    }
    if (!environment->master_port && endpoint->has_port) {
      environment->master_port = endpoint->port;
      port_source = "PET_RDZV_ENDPOINT";
    }
  }
  if (environment->master_addr) {
    parts->push_back("master " + *environment->master_addr + " (" + addr_source + ")");
  }
  if (environment->master_port) {
    parts->push_back("port " + std::to_string(*environment->master_port) + " (" + port_source +
                     ")");
  }
  return Status::Ok();
}

// Note [torchrun and Kubernetes environment].
Result<ClusterEnvironment> ReadTorchrun(const Variables& variables) {
  if (auto run = variables.Text("TORCHELASTIC_RUN_ID")) {
    return Status::InvalidArgument(
        "the launcher was started by torchrun (TORCHELASTIC_RUN_ID=" + *run +
        "), which would run one launcher per worker and hold MASTER_PORT with its own store; "
        "run the launcher itself on each machine, with torchrun's flags: launcher --nnodes N "
        "--node-rank I --nproc-per-node P --rdzv-endpoint HOST:PORT ...");
  }
  ClusterEnvironment environment;
  environment.convention = Convention::kTorchrun;
  std::vector<std::string> parts;
  std::vector<std::string> notes;
  TorchrunShape shape;
  DPL_RETURN_IF_ERROR(ReadProcessesPerMachine(variables, &shape, &notes));
  DPL_RETURN_IF_ERROR(ReadMachineCount(variables, &shape));
  if (shape.min_machines) {
    environment.min_machines = static_cast<int>(*shape.min_machines);
    environment.num_machines = static_cast<int>(*shape.machines);
    parts.push_back(std::to_string(*shape.min_machines) + " to " + std::to_string(*shape.machines) +
                    " machines (" + shape.machines_source + ")");
  } else if (shape.machines) {
    environment.num_machines = static_cast<int>(*shape.machines);
    parts.push_back(std::to_string(*shape.machines) + " machines (" + shape.machines_source + ")");
  }
  DPL_RETURN_IF_ERROR(ReadMachineIndex(variables, shape, &environment, &parts));
  if (shape.processes) {
    environment.processes_per_machine = static_cast<int>(shape.processes->value);
    parts.push_back(std::to_string(shape.processes->value) + " processes per machine (" +
                    shape.processes->name + ")");
  }
  DPL_RETURN_IF_ERROR(ReadTorchrunMaster(variables, &environment, &parts));
  parts.insert(parts.end(), notes.begin(), notes.end());
  environment.description = "torchrun/Kubernetes environment: " + JoinParts(parts);
  return environment;
}

bool HasTorchrunVariables(const Variables& variables) {
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK",
                           "GROUP_RANK", "LOCAL_WORLD_SIZE", "PET_NNODES", "PET_NODE_RANK",
                           "PET_NPROC_PER_NODE", "PET_RDZV_ENDPOINT", "TORCHELASTIC_RUN_ID"}) {
    if (variables.Has(name)) return true;
  }
  return false;
}

}  // namespace

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
  auto job = variables.FirstNumber({"SLURM_JOB_ID", "SLURM_JOBID"}, 0, kMaxSlurmId);
  if (!job.ok()) return job.status();
  std::string outside_step;
  if (job->has_value()) {
    auto step = variables.FirstNumber({"SLURM_STEP_ID", "SLURM_STEPID"}, 0, kMaxSlurmId);
    if (!step.ok()) return step.status();
    if (step->has_value()) return ReadSlurm(variables, **job, **step);
    outside_step = "Slurm job " + std::to_string((*job)->value) +
                   " but no srun step (a batch script or salloc shell runs on one node): its "
                   "nodes are not used; start the launcher with `srun --ntasks-per-node=1` to "
                   "use them";
  }
  if (HasTorchrunVariables(variables)) return ReadTorchrun(variables);
  ClusterEnvironment environment;
  environment.description = outside_step;
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
