// The torchrun and Kubernetes conventions of a cluster's environment (environment.hpp).
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
// process's torchrun. The rules:
// - P, processes per machine: PET_NPROC_PER_NODE when a number, else LOCAL_WORLD_SIZE (both set:
//   they must agree). PET_NPROC_PER_NODE=auto|cpu|gpu leaves P unknown.
// - P known: WORLD_SIZE counts processes, num_machines = WORLD_SIZE / P. P unknown: WORLD_SIZE
//   counts machines. PET_NNODES (N) gives it too, and must agree. PET_NNODES=MIN:MAX (an
//   elasticPolicy) makes the job elastic; a count from WORLD_SIZE must then lie in the range.
// - machine_id: PET_NODE_RANK, NODE_RANK or GROUP_RANK (all set must agree). RANK must then be
//   below WORLD_SIZE and be that index (Kubeflow), or with P known one of the machine's process
//   ranks index*P .. index*P+P-1 torchrun. Without them RANK alone is the index when P is
//   unknown, and with P known a process rank: the machine is RANK / P, RANK being its first
//   process (any other is ambiguous: set NODE_RANK).
// - master: MASTER_ADDR and MASTER_PORT, else PET_RDZV_ENDPOINT (Kubeflow's elastic jobs).
// - A launcher started by torchrun (TORCHELASTIC_RUN_ID set) is refused: torchrun starts
//   LOCAL_WORLD_SIZE launchers per machine, each with its own workers, and its default (static)
//   rendezvous already serves its own store on MASTER_PORT of machine 0
//   TORCHELASTIC_USE_AGENT_STORE. The launcher takes torchrun's flags itself.
// - No job token: neither sets a secret.
#include <string>
#include <vector>

#include "cluster/environment_variables.hpp"
#include "cluster/torchrun_flags.hpp"

namespace dpl::cluster::detail {
namespace {

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
  DPL_ASSIGN_OR_RETURN(auto local, variables.Number("LOCAL_WORLD_SIZE", 1, kMaxCount));
  if (from_operator && local.has_value() && from_operator->value != local->value) {
    return Status::InvalidArgument(from_operator->Show() + " and " + local->Show() +
                                   " in the environment disagree about the processes per "
                                   "machine; unset one or make them equal");
  }
  shape->processes = from_operator ? from_operator : local;
  return Status::Ok();
}

Status ReadMachineCount(const Variables& variables, TorchrunShape* shape) {
  DPL_ASSIGN_OR_RETURN(auto world, variables.Number("WORLD_SIZE", 1, kMaxCount));
  shape->world = world;
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
  DPL_ASSIGN_OR_RETURN(auto index,
                       variables.AgreeingNumber({"PET_NODE_RANK", "NODE_RANK", "GROUP_RANK"}, 0,
                                                kMaxCount - 1, "this machine's index"));
  DPL_ASSIGN_OR_RETURN(auto rank, variables.Number("RANK", 0, kMaxCount - 1));
  if (rank.has_value() && shape.world && rank->value >= shape.world->value) {
    return Status::InvalidArgument(rank->Show() + " is not below " + shape.world->Show() +
                                   " in the environment");
  }
  int64_t machine = 0;
  std::string source;
  if (index.has_value()) {
    if (rank.has_value()) DPL_RETURN_IF_ERROR(CheckRankAgainstIndex(*rank, *index, shape));
    machine = index->value;
    source = index->name;
  } else if (rank.has_value() && shape.processes) {
    if (rank->value % shape.processes->value != 0) {
      return Status::InvalidArgument(
          rank->Show() + " in the environment is a process rank (WORLD_SIZE counts processes, " +
          shape.processes->Show() +
          ") but not the first of a machine; set NODE_RANK to this "
          "machine's index");
    }
    machine = rank->value / shape.processes->value;
    source = rank->Show() + " / " + shape.processes->Show();
  } else if (rank.has_value()) {
    machine = rank->value;
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
  DPL_ASSIGN_OR_RETURN(auto port, ReadMasterPort(variables));
  if (port.has_value()) environment->master_port = static_cast<int>(port->value);
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

}  // namespace

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

}  // namespace dpl::cluster::detail
