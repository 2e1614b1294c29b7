// The Slurm and torchrun/Kubernetes environments as srun, torchrun and Kubeflow's PyTorchJob
// set them, and each contradiction with its exact message.
#include "cluster/environment.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace dpl::cluster {
namespace {

using Variables = std::map<std::string, std::string>;

ClusterEnvironment Read(const Variables& variables) {
  auto environment = ReadClusterEnvironment(variables);
  EXPECT_TRUE(environment.ok()) << environment.status().message();
  return environment.ok() ? *environment : ClusterEnvironment{};
}

std::string ErrorOf(const Variables& variables) {
  auto environment = ReadClusterEnvironment(variables);
  EXPECT_FALSE(environment.ok()) << "accepted: " << environment->description;
  EXPECT_EQ(environment.status().code(), DPL_ERR_INVALID_ARGUMENT);
  return environment.status().message();
}

// What `srun -N2 --ntasks-per-node=1` in a 4-node allocation sets on the step's node `node`.
Variables SlurmStep(int node) {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOBID", "4242"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_STEPID", "3"},
          {"SLURM_JOB_NUM_NODES", "4"},
          {"SLURM_JOB_NODELIST", "gpu[05-08]"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_NNODES", "2"},
          {"SLURM_NODELIST", "gpu[07-08]"},
          {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_NTASKS_PER_NODE", "1"},
          {"SLURM_TASKS_PER_NODE", "1(x2)"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_LOCALID", "0"}};
}

TEST(ClusterEnvironmentTest, NothingSetIsNoConvention) {
  const ClusterEnvironment environment = Read({{"HOME", "/root"}, {"PATH", "/bin"}});
  EXPECT_EQ(environment.convention, Convention::kNone);
  EXPECT_FALSE(environment.num_machines);
  EXPECT_FALSE(environment.machine_id);
  EXPECT_FALSE(environment.master_addr);
  EXPECT_FALSE(environment.master_port);
  EXPECT_FALSE(environment.job_token);
  EXPECT_FALSE(environment.processes_per_machine);
  EXPECT_EQ(environment.description, "");
  EXPECT_STREQ(ConventionName(environment.convention), "none");
}

TEST(ClusterEnvironmentTest, EmptyValuesCountAsUnset) {
  EXPECT_EQ(Read({{"MASTER_ADDR", ""}, {"WORLD_SIZE", ""}}).convention, Convention::kNone);
}

TEST(ClusterEnvironmentTest, SlurmStepOnePerNode) {
  const ClusterEnvironment environment = Read(SlurmStep(1));
  EXPECT_EQ(environment.convention, Convention::kSlurm);
  EXPECT_STREQ(ConventionName(environment.convention), "slurm");
  EXPECT_EQ(environment.num_machines, 2);  // the step's nodes, not the allocation's 4
  EXPECT_EQ(environment.machine_id, 1);
  EXPECT_EQ(environment.master_addr, "gpu07");
  EXPECT_EQ(environment.master_port, 20000 + (4242 % 900) * 10 + 3);
  EXPECT_EQ(environment.job_token, "slurm-4242.3");
  EXPECT_FALSE(environment.processes_per_machine);  // SLURM_NTASKS_PER_NODE counts launchers
  EXPECT_EQ(environment.description,
            "Slurm job 4242 step 3: 2 machines (SLURM_STEP_NUM_NODES), machine 1 (SLURM_NODEID), "
            "master gpu07 (first of SLURM_STEP_NODELIST), port 26423 (from SLURM_JOB_ID and "
            "SLURM_STEP_ID), job token from SLURM_JOB_ID and SLURM_STEP_ID");
}

TEST(ClusterEnvironmentTest, EveryNodeOfAStepAgreesOnMasterPortAndToken) {
  const ClusterEnvironment first = Read(SlurmStep(0));
  const ClusterEnvironment second = Read(SlurmStep(1));
  EXPECT_EQ(first.machine_id, 0);
  EXPECT_EQ(second.machine_id, 1);
  EXPECT_EQ(first.master_addr, second.master_addr);
  EXPECT_EQ(first.master_port, second.master_port);
  EXPECT_EQ(first.job_token, second.job_token);
}

TEST(ClusterEnvironmentTest, SlurmPortsStayInTheirRangeAndApart) {
  std::set<int> ports;
  for (int64_t job = 100000; job < 100900; ++job) {
    for (int64_t step = 0; step < 10; ++step) {
      const int port = SlurmStorePort(job, step);
      EXPECT_GE(port, 20000);
      EXPECT_LE(port, 28999);
      ports.insert(port);
    }
  }
  EXPECT_EQ(ports.size(), 9000u);  // 900 consecutive jobs x 10 steps: no two share a port
  EXPECT_EQ(SlurmStorePort(4294967295, 4294967295), 27955);  // 20000 + 795 * 10 + 5
}

TEST(ClusterEnvironmentTest, OlderSlurmVariableNames) {
  const ClusterEnvironment environment = Read({{"SLURM_JOBID", "77"},
                                               {"SLURM_STEPID", "0"},
                                               {"SLURM_NNODES", "3"},
                                               {"SLURM_NODELIST", "n[1-3]"},
                                               {"SLURM_NODEID", "2"}});
  EXPECT_EQ(environment.num_machines, 3);
  EXPECT_EQ(environment.machine_id, 2);
  EXPECT_EQ(environment.master_addr, "n1");
  EXPECT_EQ(environment.job_token, "slurm-77.0");
  EXPECT_EQ(environment.description,
            "Slurm job 77 step 0: 3 machines (SLURM_NNODES), machine 2 (SLURM_NODEID), master n1 "
            "(first of SLURM_NODELIST), port 20770 (from SLURM_JOBID and SLURM_STEPID), job token "
            "from SLURM_JOBID and SLURM_STEPID");
}

TEST(ClusterEnvironmentTest, MasterVariablesWinInsideSlurm) {
  Variables variables = SlurmStep(1);
  variables["MASTER_ADDR"] = "10.1.2.3";
  variables["MASTER_PORT"] = "12345";
  variables["WORLD_SIZE"] = "8";  // a PyTorch recipe's, ignored: Slurm gives the layout
  const ClusterEnvironment environment = Read(variables);
  EXPECT_EQ(environment.convention, Convention::kSlurm);
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.master_addr, "10.1.2.3");
  EXPECT_EQ(environment.master_port, 12345);
  EXPECT_EQ(environment.description,
            "Slurm job 4242 step 3: 2 machines (SLURM_STEP_NUM_NODES), machine 1 (SLURM_NODEID), "
            "master 10.1.2.3 (MASTER_ADDR), port 12345 (MASTER_PORT), job token from SLURM_JOB_ID "
            "and SLURM_STEP_ID");
}

TEST(ClusterEnvironmentTest, SeveralTasksPerNodeAreRefused) {
  Variables variables = SlurmStep(0);
  variables["SLURM_STEP_NUM_TASKS"] = "8";
  EXPECT_EQ(ErrorOf(variables),
            "the Slurm step runs 8 tasks on 2 nodes (SLURM_STEP_NUM_TASKS=8, "
            "SLURM_STEP_NUM_NODES=2): every task would be a launcher starting its own workers. "
            "Start one launcher per node, `srun --ntasks-per-node=1 launcher ...`, and give the "
            "workers per node with --num-processes");
}

TEST(ClusterEnvironmentTest, BadSlurmValuesAreRefused) {
  Variables variables = SlurmStep(0);
  variables["SLURM_NODEID"] = "first";
  EXPECT_EQ(ErrorOf(variables),
            "SLURM_NODEID='first' in the environment is not a whole number from 0 to 1048575");
  variables["SLURM_NODEID"] = "2";
  EXPECT_EQ(ErrorOf(variables),
            "SLURM_NODEID=2 is not below SLURM_STEP_NUM_NODES=2 in the environment");
  variables = SlurmStep(0);
  variables["SLURM_STEP_NODELIST"] = "gpu[07-09]";
  EXPECT_EQ(ErrorOf(variables),
            "SLURM_STEP_NODELIST='gpu[07-09]' names 3 hosts but SLURM_STEP_NUM_NODES=2; set "
            "MASTER_ADDR to machine 0's host");
  variables["SLURM_STEP_NODELIST"] = "gpu[07-";
  EXPECT_EQ(ErrorOf(variables),
            "SLURM_STEP_NODELIST: Slurm host list 'gpu[07-': '[' at "
            "character 4 is not closed by ']'");
  variables = SlurmStep(0);
  variables["SLURM_JOB_ID"] = "12x";
  EXPECT_EQ(ErrorOf(variables),
            "SLURM_JOB_ID='12x' in the environment is not a whole number from 0 to 4294967295");
  variables = SlurmStep(0);
  variables.erase("SLURM_NODEID");
  EXPECT_EQ(ErrorOf(variables),
            "Slurm step SLURM_JOB_ID=4242 SLURM_STEP_ID=3 without SLURM_STEP_NUM_NODES or "
            "SLURM_NODEID: start the launcher with srun, which sets them");
}

TEST(ClusterEnvironmentTest, SlurmOutsideAStepIsNotUsed) {
  // The batch script of `sbatch -N2`: a job id, no step.
  const ClusterEnvironment environment = Read({{"SLURM_JOB_ID", "9"},
                                               {"SLURM_JOB_NUM_NODES", "2"},
                                               {"SLURM_NODEID", "0"},
                                               {"SLURM_JOB_NODELIST", "n[1-2]"}});
  EXPECT_EQ(environment.convention, Convention::kNone);
  EXPECT_FALSE(environment.num_machines);
  EXPECT_EQ(environment.description,
            "Slurm job 9 but no srun step (a batch script or salloc shell runs on one node): its "
            "nodes are not used; start the launcher with `srun --ntasks-per-node=1` to use them");
  // The batch script's own MASTER_ADDR is then the torchrun convention's.
  EXPECT_EQ(Read({{"SLURM_JOB_ID", "9"}, {"MASTER_ADDR", "n1"}}).convention, Convention::kTorchrun);
}

// The allocation a batch script or salloc shell sees, kept for the launcher's first line whatever
// convention the rest reads; a count that is no number is left out, not refused.
TEST(ClusterEnvironmentTest, AnAllocationOutsideAStepIsDescribed) {
  const ClusterEnvironment environment =
      Read({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}});
  ASSERT_TRUE(environment.allocation_outside_step.has_value());
  EXPECT_EQ(environment.allocation_outside_step->job_id, 9);
  EXPECT_EQ(environment.allocation_outside_step->nodes, 2);
  EXPECT_EQ(environment.allocation_outside_step->node_list, "n[1-2]");
  const ClusterEnvironment older = Read({{"SLURM_JOBID", "10"},
                                         {"SLURM_NNODES", "4"},
                                         {"SLURM_NODELIST", "a,b,c,d"},
                                         {"MASTER_ADDR", "a"}});
  EXPECT_EQ(older.convention, Convention::kTorchrun);
  ASSERT_TRUE(older.allocation_outside_step.has_value());
  EXPECT_EQ(older.allocation_outside_step->nodes, 4);
  EXPECT_EQ(older.allocation_outside_step->node_list, "a,b,c,d");
  const ClusterEnvironment garbled = Read({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NUM_NODES", "2x"}});
  ASSERT_TRUE(garbled.allocation_outside_step.has_value());
  EXPECT_EQ(garbled.allocation_outside_step->nodes, 0);
  EXPECT_FALSE(Read(SlurmStep(0)).allocation_outside_step.has_value());
  EXPECT_FALSE(Read({{"MASTER_ADDR", "a"}}).allocation_outside_step.has_value());
}

TEST(ClusterEnvironmentTest, TheAllocationsLineGivesTheSrunCommand) {
  SlurmAllocation allocation;
  allocation.job_id = 42;
  allocation.nodes = 2;
  allocation.node_list = "gpu[01-02]";
  EXPECT_EQ(SlurmAllocationLine(
                allocation, {"/opt/dpl/launcher", "--num-processes", "4", "--data-options",
                             "mean=0.5, std=0.25", "--job-token", "secret", "--job_token=secret"}),
            "Slurm job 42 holds 2 nodes (gpu[01-02]), but this launcher runs outside a job step: "
            "it trains on this node alone. To train on every node, start one launcher per node: "
            "srun --ntasks-per-node=1 /opt/dpl/launcher --num-processes 4 --data-options "
            "'mean=0.5, std=0.25'");
}

TEST(ClusterEnvironmentTest, KubeflowBefore17OneEntryPerPod) {
  const ClusterEnvironment environment = Read({{"MASTER_ADDR", "job-master-0"},
                                               {"MASTER_PORT", "23456"},
                                               {"WORLD_SIZE", "3"},
                                               {"RANK", "2"},
                                               {"PYTHONUNBUFFERED", "0"}});
  EXPECT_EQ(environment.convention, Convention::kTorchrun);
  EXPECT_STREQ(ConventionName(environment.convention), "torchrun/kubernetes");
  EXPECT_EQ(environment.num_machines, 3);
  EXPECT_EQ(environment.machine_id, 2);
  EXPECT_EQ(environment.master_addr, "job-master-0");
  EXPECT_EQ(environment.master_port, 23456);
  EXPECT_FALSE(environment.processes_per_machine);
  EXPECT_FALSE(environment.job_token);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: 3 machines (WORLD_SIZE), machine 2 (RANK), master "
            "job-master-0 (MASTER_ADDR), port 23456 (MASTER_PORT)");
}

TEST(ClusterEnvironmentTest, Kubeflow17WorldSizeCountsProcesses) {
  // nprocPerNode: "4", two pods; this is worker 0, the second pod.
  const ClusterEnvironment environment = Read({{"MASTER_ADDR", "job-master-0"},
                                               {"MASTER_PORT", "23456"},
                                               {"WORLD_SIZE", "8"},
                                               {"RANK", "1"},
                                               {"PET_NPROC_PER_NODE", "4"},
                                               {"PET_NODE_RANK", "1"},
                                               {"PET_NNODES", "2"}});
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.machine_id, 1);
  EXPECT_EQ(environment.processes_per_machine, 4);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: 2 machines (WORLD_SIZE=8 / PET_NPROC_PER_NODE=4), "
            "machine 1 (PET_NODE_RANK), 4 processes per machine (PET_NPROC_PER_NODE), master "
            "job-master-0 (MASTER_ADDR), port 23456 (MASTER_PORT)");
}

TEST(ClusterEnvironmentTest, Kubeflow17AutoCountsPods) {
  const ClusterEnvironment environment = Read({{"MASTER_ADDR", "job-master-0"},
                                               {"WORLD_SIZE", "2"},
                                               {"RANK", "1"},
                                               {"PET_NPROC_PER_NODE", "auto"},
                                               {"PET_NODE_RANK", "1"},
                                               {"PET_NNODES", "2"}});
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.machine_id, 1);
  EXPECT_FALSE(environment.processes_per_machine);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: 2 machines (WORLD_SIZE), machine 1 (PET_NODE_RANK), "
            "master job-master-0 (MASTER_ADDR), PET_NPROC_PER_NODE=auto left to --num-processes");
}

TEST(ClusterEnvironmentTest, TorchrunMeaningsWithLocalWorldSize) {
  // RANK alone, a process rank: the machine's first process.
  ClusterEnvironment environment = Read(
      {{"MASTER_ADDR", "10.0.0.1"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"RANK", "4"}});
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.machine_id, 1);
  EXPECT_EQ(environment.processes_per_machine, 4);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: 2 machines (WORLD_SIZE=8 / LOCAL_WORLD_SIZE=4), "
            "machine 1 (RANK=4 / LOCAL_WORLD_SIZE=4), 4 processes per machine (LOCAL_WORLD_SIZE), "
            "master 10.0.0.1 (MASTER_ADDR)");
  // NODE_RANK with a process rank of that machine.
  environment =
      Read({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"NODE_RANK", "1"}, {"RANK", "6"}});
  EXPECT_EQ(environment.machine_id, 1);
  // GROUP_RANK, torchrun's name for the node's index.
  environment = Read({{"WORLD_SIZE", "2"}, {"GROUP_RANK", "1"}});
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.machine_id, 1);
}

TEST(ClusterEnvironmentTest, RendezvousEndpointFillsWhatMasterVariablesLeave) {
  ClusterEnvironment environment = Read(
      {{"PET_RDZV_ENDPOINT", "job-worker-0:29400"}, {"PET_NNODES", "2"}, {"PET_NODE_RANK", "0"}});
  EXPECT_EQ(environment.num_machines, 2);
  EXPECT_EQ(environment.machine_id, 0);
  EXPECT_EQ(environment.master_addr, "job-worker-0");
  EXPECT_EQ(environment.master_port, 29400);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: 2 machines (PET_NNODES), machine 0 (PET_NODE_RANK), "
            "master job-worker-0 (PET_RDZV_ENDPOINT), port 29400 (PET_RDZV_ENDPOINT)");
  environment = Read({{"MASTER_ADDR", "m"}, {"PET_RDZV_ENDPOINT", "job-worker-0:29400"}});
  EXPECT_EQ(environment.master_addr, "m");
  EXPECT_EQ(environment.master_port, 29400);
  environment = Read({{"PET_RDZV_ENDPOINT", "[fd00::1]"}});
  EXPECT_EQ(environment.master_addr, "fd00::1");
  EXPECT_FALSE(environment.master_port);
  EXPECT_EQ(ErrorOf({{"PET_RDZV_ENDPOINT", "host:port"}}),
            "PET_RDZV_ENDPOINT: the port of 'host:port' must be a number from 0 to 65535 (got "
            "'port')");
}

TEST(ClusterEnvironmentTest, MasterAloneIsTorchrunsConvention) {
  const ClusterEnvironment environment = Read({{"MASTER_ADDR", "10.0.0.1"}});
  EXPECT_EQ(environment.convention, Convention::kTorchrun);
  EXPECT_EQ(environment.master_addr, "10.0.0.1");
  EXPECT_FALSE(environment.master_port);
  EXPECT_FALSE(environment.num_machines);
  EXPECT_FALSE(environment.machine_id);
  EXPECT_EQ(environment.description,
            "torchrun/Kubernetes environment: master 10.0.0.1 "
            "(MASTER_ADDR)");
}

TEST(ClusterEnvironmentTest, BadNumbersAreRefused) {
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "two"}}),
            "WORLD_SIZE='two' in the environment is not a whole number from 1 to 1048576");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "0"}}),
            "WORLD_SIZE='0' in the environment is not a whole number from 1 to 1048576");
  EXPECT_EQ(ErrorOf({{"RANK", "-1"}}),
            "RANK='-1' in the environment is not a whole number from 0 to 1048575");
  EXPECT_EQ(ErrorOf({{"MASTER_PORT", "70000"}}),
            "MASTER_PORT='70000' in the environment is not a whole number from 0 to 65535");
  EXPECT_EQ(ErrorOf({{"PET_NPROC_PER_NODE", "lots"}}),
            "PET_NPROC_PER_NODE: 'lots' is not a number of processes from 1 to 1048576, auto, "
            "cpu or gpu");
  EXPECT_EQ(ErrorOf({{"PET_NNODES", "2:1"}}),
            "PET_NNODES: the range '2:1' goes down; write it as 1:2");
}

TEST(ClusterEnvironmentTest, ContradictionsAreRefused) {
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "4"}, {"RANK", "4"}}),
            "RANK=4 is not below WORLD_SIZE=4 in the environment");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "10"}, {"LOCAL_WORLD_SIZE", "4"}}),
            "WORLD_SIZE=10 is not a multiple of LOCAL_WORLD_SIZE=4 in the environment: with the "
            "processes per machine known, WORLD_SIZE counts processes (machines x processes per "
            "machine)");
  EXPECT_EQ(ErrorOf({{"PET_NPROC_PER_NODE", "4"}, {"LOCAL_WORLD_SIZE", "2"}}),
            "PET_NPROC_PER_NODE=4 and LOCAL_WORLD_SIZE=2 in the environment disagree about the "
            "processes per machine; unset one or make them equal");
  EXPECT_EQ(ErrorOf({{"NODE_RANK", "1"}, {"GROUP_RANK", "2"}}),
            "NODE_RANK=1 and GROUP_RANK=2 in the environment disagree about this machine's index; "
            "unset one or make them equal");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "3"}, {"RANK", "2"}, {"NODE_RANK", "1"}}),
            "RANK=2 and NODE_RANK=1 in the environment disagree about this machine's index "
            "(without LOCAL_WORLD_SIZE or PET_NPROC_PER_NODE, RANK counts machines); unset one or "
            "make them equal");
  EXPECT_EQ(
      ErrorOf({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"RANK", "2"}, {"NODE_RANK", "1"}}),
      "RANK=2 in the environment is neither this machine's index (NODE_RANK=1) nor one of "
      "its process ranks (4..7 with LOCAL_WORLD_SIZE=4)");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"RANK", "5"}}),
            "RANK=5 in the environment is a process rank (WORLD_SIZE counts processes, "
            "LOCAL_WORLD_SIZE=4) but not the first of a machine; set NODE_RANK to this machine's "
            "index");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "2"}, {"NODE_RANK", "2"}}),
            "machine index 2 (NODE_RANK) is not below the 2 machines of WORLD_SIZE in the "
            "environment");
  EXPECT_EQ(ErrorOf({{"WORLD_SIZE", "2"}, {"PET_NNODES", "3"}}),
            "PET_NNODES=3 in the environment says 3 machines but WORLD_SIZE says 2");
}

TEST(ClusterEnvironmentTest, ElasticRangesMakeAnElasticJob) {
  const ClusterEnvironment elastic =
      Read({{"PET_NNODES", "1:3"}, {"PET_RDZV_ENDPOINT", "job-worker-0:29400"}});
  EXPECT_EQ(elastic.min_machines, 1);
  EXPECT_EQ(elastic.num_machines, 3);
  EXPECT_EQ(elastic.master_addr, "job-worker-0");
  EXPECT_EQ(elastic.description,
            "torchrun/Kubernetes environment: 1 to 3 machines (PET_NNODES), master job-worker-0 "
            "(PET_RDZV_ENDPOINT), port 29400 (PET_RDZV_ENDPOINT)");
  EXPECT_EQ(Read({{"PET_NNODES", "1:3"}, {"WORLD_SIZE", "2"}}).num_machines, 3);
  EXPECT_EQ(ErrorOf({{"PET_NNODES", "2:3"}, {"WORLD_SIZE", "4"}}),
            "PET_NNODES=2:3 in the environment allows 2 to 3 machines but WORLD_SIZE says 4");
  const ClusterEnvironment fixed = Read({{"PET_NNODES", "2:2"}});
  EXPECT_EQ(fixed.num_machines, 2);
  EXPECT_FALSE(fixed.min_machines);
}

TEST(ClusterEnvironmentTest, LauncherStartedByTorchrunIsRefused) {
  EXPECT_EQ(ErrorOf({{"TORCHELASTIC_RUN_ID", "none"},
                     {"WORLD_SIZE", "2"},
                     {"RANK", "0"},
                     {"GROUP_RANK", "0"},
                     {"LOCAL_WORLD_SIZE", "1"},
                     {"LOCAL_RANK", "0"}}),
            "the launcher was started by torchrun (TORCHELASTIC_RUN_ID=none), which would run one "
            "launcher per worker and hold MASTER_PORT with its own store; run the launcher itself "
            "on each machine, with torchrun's flags: launcher --nnodes N --node-rank I "
            "--nproc-per-node P --rdzv-endpoint HOST:PORT ...");
}

TEST(ClusterEnvironmentTest, LookupFunctionAndProcessEnvironment) {
  const EnvironmentLookup lookup = [](const std::string& name) -> std::optional<std::string> {
    if (name == "WORLD_SIZE") return "2";
    if (name == "RANK") return "1";
    return std::nullopt;
  };
  auto environment = ReadClusterEnvironment(lookup);
  ASSERT_TRUE(environment.ok()) << environment.status().message();
  EXPECT_EQ(environment->machine_id, 1);

  setenv("DPL_CLUSTER_TEST_VARIABLE", "a value", 1);
  EXPECT_EQ(ProcessEnvironment()("DPL_CLUSTER_TEST_VARIABLE"), "a value");
  unsetenv("DPL_CLUSTER_TEST_VARIABLE");
  EXPECT_EQ(ProcessEnvironment()("DPL_CLUSTER_TEST_VARIABLE"), std::nullopt);
}

}  // namespace
}  // namespace dpl::cluster
