// The cluster's conventions on the launcher's command line: Slurm's and torchrun's environments as
// defaults that flags override, torchrun's flag names, --machine-id auto, elastic ranges, the
// settings every machine must share, and the ssh command of --hostfile.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "cli/options.hpp"
#include "cluster/remote_command.hpp"

namespace dpl::cli {
namespace {

// Every variable the launcher reads from a cluster's environment, cleared around each test.
const char* const kClusterVariables[] = {
    "SLURM_JOB_ID",        "SLURM_JOBID",         "SLURM_STEP_ID",
    "SLURM_STEPID",        "SLURM_NODEID",        "SLURM_STEP_NUM_NODES",
    "SLURM_JOB_NUM_NODES", "SLURM_NNODES",        "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",  "SLURM_NODELIST",      "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",        "SLURM_NPROCS",        "MASTER_ADDR",
    "MASTER_PORT",         "WORLD_SIZE",          "RANK",
    "NODE_RANK",           "GROUP_RANK",          "LOCAL_WORLD_SIZE",
    "PET_NNODES",          "PET_NODE_RANK",       "PET_NPROC_PER_NODE",
    "PET_RDZV_ENDPOINT",   "TORCHELASTIC_RUN_ID", "DPL_JOB_TOKEN"};

class ClusterOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kClusterVariables) unsetenv(name);
  }
  void TearDown() override { SetUp(); }
  static void Set(const std::map<std::string, std::string>& variables) {
    for (const auto& [name, value] : variables) setenv(name.c_str(), value.c_str(), 1);
  }
};

Result<Options> Parse(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "launcher");
  std::vector<const char*> argv;
  for (const auto& argument : arguments) argv.push_back(argument.c_str());
  return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
}

Options MustParse(const std::vector<std::string>& arguments) {
  auto options = Parse(arguments);
  EXPECT_TRUE(options.ok()) << options.status().message();
  return options.ok() ? *options : Options{};
}

std::string ErrorOf(const std::vector<std::string>& arguments) {
  auto options = Parse(arguments);
  EXPECT_FALSE(options.ok()) << "parsed, but should be refused";
  return options.status().message();
}

// What srun sets on node 1 of a two-node step of job 77.
const std::map<std::string, std::string> kSlurmNode1 = {{"SLURM_JOB_ID", "77"},
                                                        {"SLURM_STEP_ID", "0"},
                                                        {"SLURM_NODEID", "1"},
                                                        {"SLURM_STEP_NUM_NODES", "2"},
                                                        {"SLURM_STEP_NUM_TASKS", "2"},
                                                        {"SLURM_STEP_NODELIST", "gpu[07-08]"},
                                                        {"SLURM_JOB_NODELIST", "gpu[07-08]"}};

TEST_F(ClusterOptionsTest, ASlurmStepGivesTheJobsShapeAndSaysSo) {
  Set(kSlurmNode1);
  const Options options = MustParse({"--num-processes", "4", "--batch-size", "64"});
  EXPECT_EQ(options.num_machines, 2);
  EXPECT_EQ(options.machine_id, 1);
  EXPECT_EQ(options.master_addr, "gpu07");
  EXPECT_EQ(options.master_port, 20000 + 77 * 10);
  EXPECT_EQ(options.job_token, "slurm-77.0");
  EXPECT_EQ(options.num_processes, 4);
  EXPECT_EQ(options.cluster_environment,
            "Slurm job 77 step 0: 2 machines (SLURM_STEP_NUM_NODES), machine 1 (SLURM_NODEID), "
            "master gpu07 (first of SLURM_STEP_NODELIST), port 20770 (from SLURM_JOB_ID and "
            "SLURM_STEP_ID), job token from SLURM_JOB_ID and SLURM_STEP_ID");
}

TEST_F(ClusterOptionsTest, FlagsAndTheirOwnVariablesWinOverTheClustersAndAreNamed) {
  Set(kSlurmNode1);
  Set({{"DPL_JOB_TOKEN", "secret"}});
  const Options options =
      MustParse({"--machine-id", "0", "--master-port", "4000", "--batch-size", "64"});
  EXPECT_EQ(options.machine_id, 0);
  EXPECT_EQ(options.master_port, 4000);
  EXPECT_EQ(options.job_token, "secret");
  EXPECT_EQ(options.num_machines, 2);  // what no flag gave still comes from Slurm
  const std::string& line = options.cluster_environment;
  EXPECT_NE(line.find("; flags win: --machine-id 0 (the command line), --master-port 4000 (the "
                      "command line), --job-token (DPL_JOB_TOKEN (environment))"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("secret"), std::string::npos) << "the token is in the log: " << line;
}

TEST_F(ClusterOptionsTest, TorchrunAndKubeflowVariablesAreRead) {
  // Kubeflow's PyTorchJob up to v1.6: RANK and WORLD_SIZE count pods.
  Set({{"MASTER_ADDR", "job-master-0"},
       {"MASTER_PORT", "23456"},
       {"WORLD_SIZE", "3"},
       {"RANK", "2"}});
  Options options = MustParse({"--batch-size", "66"});
  EXPECT_EQ(options.num_machines, 3);
  EXPECT_EQ(options.machine_id, 2);
  EXPECT_EQ(options.master_addr, "job-master-0");
  EXPECT_EQ(options.master_port, 23456);
  EXPECT_EQ(options.cluster_environment,
            "torchrun/Kubernetes environment: 3 machines (WORLD_SIZE), machine 2 (RANK), master "
            "job-master-0 (MASTER_ADDR), port 23456 (MASTER_PORT)");
  // torchrun's: WORLD_SIZE counts processes when LOCAL_WORLD_SIZE says how many per machine.
  Set({{"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}, {"RANK", "4"}, {"NODE_RANK", "1"}});
  options = MustParse({});
  EXPECT_EQ(options.num_machines, 2);
  EXPECT_EQ(options.machine_id, 1);
  EXPECT_EQ(options.num_processes, 4);
}

TEST_F(ClusterOptionsTest, AContradictoryEnvironmentIsRefusedNamingTheVariables) {
  Set({{"WORLD_SIZE", "4"}, {"RANK", "4"}});
  EXPECT_EQ(ErrorOf({}), "RANK=4 is not below WORLD_SIZE=4 in the environment");
  // A bad value of a flag's own variable is named first, as that variable.
  Set({{"MASTER_PORT", "http"}});
  EXPECT_EQ(ErrorOf({}),
            "MASTER_PORT (environment) must be an integer between 0 and 65535 (got 'http')");
  // A value from the cluster is checked as the flag's, naming where it came from.
  unsetenv("MASTER_PORT");
  Set({{"WORLD_SIZE", "2000"}, {"RANK", "0"}});
  EXPECT_EQ(ErrorOf({}),
            "--num-machines (from the torchrun/kubernetes environment) must be between 1 and 1024 "
            "(got 2000); the environment says: torchrun/Kubernetes environment: 2000 machines "
            "(WORLD_SIZE), machine 0 (RANK) (unset what is left over, or give --num-machines)");
  // A stray RANK alone: the variable is named.
  unsetenv("WORLD_SIZE");
  Set({{"RANK", "1"}});
  EXPECT_EQ(ErrorOf({}),
            "--machine-id (from the torchrun/kubernetes environment) must be between 0 and 0 "
            "(got 1); the environment says: torchrun/Kubernetes environment: machine 1 (RANK) "
            "(unset what is left over, or give --machine-id)");
  // With WORLD_SIZE too the shape is whole, but machine 1 cannot find machine 0's port 0.
  Set({{"WORLD_SIZE", "2"}});
  EXPECT_EQ(ErrorOf({"--master-port", "0"}),
            "--machine-id 1 with --master-port 0: port 0 lets machine 0 pick a free port, which no "
            "other machine can know; give every launcher the port machine 0 listens on (its log "
            "says it)");
}

// sbatch -N2 running the launcher without srun: one machine's job, whose first line names the
// allocation and the srun command with this command line.
TEST_F(ClusterOptionsTest, AnAllocationOutsideAStepNamesTheSrunCommand) {
  Set({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}});
  Options options = MustParse({"--num-processes", "2", "--epochs", "3"});
  EXPECT_EQ(options.num_machines, 1);
  EXPECT_EQ(options.cluster_environment,
            "Slurm job 42 holds 2 nodes (n[1-2]), but this launcher runs outside a job step: it "
            "trains on this node alone. To train on every node, start one launcher per node: srun "
            "--ntasks-per-node=1 launcher --num-processes 2 --epochs 3");
  // A batch script's MASTER_ADDR: the torchrun convention, still one machine.
  Set({{"MASTER_ADDR", "n1"}});
  options = MustParse({});
  EXPECT_EQ(options.cluster_environment,
            "Slurm job 42 holds 2 nodes (n[1-2]), but this launcher runs outside a job step: it "
            "trains on this node alone. To train on every node, start one launcher per node: srun "
            "--ntasks-per-node=1 launcher; torchrun/Kubernetes environment: master n1 "
            "(MASTER_ADDR)");
  // Machines the user arranged: the plain description, as before.
  unsetenv("MASTER_ADDR");
  options = MustParse({"--num-machines", "2", "--master-addr", "n1"});
  EXPECT_EQ(options.cluster_environment.rfind("Slurm job 42 but no srun step", 0), 0u)
      << options.cluster_environment;
  // One node: nothing to add.
  Set({{"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_JOB_NODELIST", "n1"}});
  options = MustParse({});
  EXPECT_EQ(options.cluster_environment.rfind("Slurm job 42 but no srun step", 0), 0u)
      << options.cluster_environment;
}

// The launcher binary itself: its first line.
TEST_F(ClusterOptionsTest, TheLaunchersFirstLineNamesTheAllocation) {
  Set({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_JOB_NODELIST", "n[1-2]"}});
  const std::string command = std::string(DPL_TEST_LAUNCHER) + " --plugin-dir " +
                              DPL_TEST_PLUGIN_DIR +
                              " --backend tcp --selftest --master-port 0 --log-time none";
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << output;
  EXPECT_EQ(output.substr(0, output.find('\n')),
            "[launcher 0] Slurm job 42 holds 2 nodes (n[1-2]), but this launcher runs outside a "
            "job step: it trains on this node alone. To train on every node, start one launcher "
            "per node: srun --ntasks-per-node=1 " +
                std::string(DPL_TEST_LAUNCHER) + " --plugin-dir " + DPL_TEST_PLUGIN_DIR +
                " --backend tcp --selftest --master-port 0 --log-time none")
      << output;
}

TEST_F(ClusterOptionsTest, WorkersAndOtherCommandsIgnoreTheClusterEnvironment) {
  // A worker's environment holds torchrun's variables, which its launcher set for it.
  Set({{"WORLD_SIZE", "4"}, {"RANK", "4"}});
  const Options worker = MustParse({"--worker", "--local-rank", "0", "--store-addr", "h:1",
                                    "--num-machines", "2", "--machine-id", "1"});
  EXPECT_EQ(worker.machine_id, 1);
  EXPECT_EQ(worker.cluster_environment, "");
  EXPECT_EQ(MustParse({"--help"}).command, Command::kHelp);
  EXPECT_EQ(MustParse({"plugins"}).command, Command::kPlugins);
}

TEST_F(ClusterOptionsTest, TorchrunFlagNamesAreAliases) {
  Options options = MustParse({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "4",
                               "--rdzv-endpoint", "10.0.0.1:29400", "--batch-size", "64"});
  EXPECT_EQ(options.num_machines, 2);
  EXPECT_EQ(options.machine_id, 1);
  EXPECT_EQ(options.num_processes, 4);
  EXPECT_EQ(options.master_addr, "10.0.0.1");
  EXPECT_EQ(options.master_port, 29400);
  options = MustParse({"--nnodes=2", "--node_rank=1", "--nproc_per_node=2", "--master_addr", "h",
                       "--master_port", "5"});
  EXPECT_EQ(options.machine_id, 1);
  EXPECT_EQ(options.master_addr, "h");
  EXPECT_EQ(options.master_port, 5);
  EXPECT_EQ(ErrorOf({"--nnodes", "2", "--num-machines", "2"}),
            "--num-machines was given more than once; give it once");
  EXPECT_EQ(ErrorOf({"--rdzv-endpoint", "h:1", "--master-port", "2"}),
            "--master-port was given more than once; give it once");
  EXPECT_EQ(ErrorOf({"--nproc-per-node", "gpu"}),
            "--nproc-per-node: 'gpu' needs the number of GPUs, which the launcher does not count; "
            "give the number of processes instead (e.g. 4)");
  EXPECT_EQ(ErrorOf({"--node-rank"}), "--node-rank needs a value; see launcher --help");
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/torchrun_aliases.cfg";
  {
    std::ofstream file(path);
    file << "nnodes = 2\nnode_rank = 1\n";
  }
  options = MustParse({"--config", path});
  EXPECT_EQ(options.num_machines, 2);
  EXPECT_EQ(options.machine_id, 1);
}

TEST_F(ClusterOptionsTest, MachineIdIsAutoUnlessSomethingSaysOtherwise) {
  EXPECT_EQ(MustParse({}).machine_id, 0);  // one machine is machine 0
  Options options = MustParse({"--num-machines", "2"});
  EXPECT_EQ(options.machine_id, kAutoMachineId);
  EXPECT_EQ(MustParse({"--num-machines", "2", "--machine-id", "auto"}).machine_id, kAutoMachineId);
  // Another launcher of the job gets "auto" too; a worker never does.
  const std::vector<std::string> arguments = LauncherArguments(options);
  const auto id = std::find(arguments.begin(), arguments.end(), "--machine-id");
  ASSERT_NE(id, arguments.end());
  EXPECT_EQ(*(id + 1), "auto");
  EXPECT_EQ(
      ErrorOf({"--worker", "--local-rank", "0", "--store-addr", "h:1", "--num-machines", "2"}),
      "--worker needs its machine's --machine-id");
}

TEST_F(ClusterOptionsTest, ElasticRanges) {
  Options options = MustParse({"--num-machines", "2:4", "--batch-size", "24", "--checkpoint-dir",
                               "/tmp/c", "--join-grace", "1.5"});
  EXPECT_TRUE(options.elastic());
  EXPECT_EQ(options.min_machines, 2);
  EXPECT_EQ(options.num_machines, 4);
  EXPECT_EQ(options.join_grace, std::chrono::milliseconds(1500));
  EXPECT_EQ(
      MustParse({"--nnodes", "1:3", "--batch-size", "6", "--checkpoint-dir", "/c"}).min_machines,
      1);
  EXPECT_FALSE(MustParse({"--num-machines", "3:3", "--batch-size", "3"}).elastic());
  EXPECT_EQ(ErrorOf({"--num-machines", "3:2"}), "--num-machines 3:2 goes down; write it as 2:3");
  EXPECT_EQ(ErrorOf({"--num-machines", "0:2"}),
            "--num-machines MIN must be between 1 and 1024 (got 0)");
  EXPECT_EQ(ErrorOf({"--num-machines", "2:3", "--batch-size", "64", "--checkpoint-dir", "/c"}),
            "--batch-size 64 is not divisible by the world size 3 of 3 machines (--num-processes "
            "1 x 3 of --num-machines 2:3); an elastic job keeps its global batch, which must split "
            "evenly over every number of machines it may run with");
  EXPECT_EQ(ErrorOf({"--num-machines", "2:3", "--batch-size", "12"}),
            "--num-machines 2:3 is an elastic job, which falls back on its newest checkpoint "
            "when its workers cannot regroup in place: give --checkpoint-dir (and "
            "--checkpoint-every N)");
  Set({{"PET_NNODES", "2:3"}, {"PET_RDZV_ENDPOINT", "job-0:29400"}});
  options = MustParse({"--batch-size", "12", "--checkpoint-dir", "/c"});
  EXPECT_EQ(options.min_machines, 2);
  EXPECT_EQ(options.num_machines, 3);
}

std::map<std::string, std::string> Settings(const std::vector<std::string>& arguments) {
  std::map<std::string, std::string> settings;
  for (const auto& [name, value] : SettingsThatMustMatch(MustParse(arguments))) {
    settings[name] = value;
  }
  return settings;
}

TEST_F(ClusterOptionsTest, EverySettingThatChangesTheMathMustMatch) {
  const auto defaults = Settings({});
  for (const char* flag : {"--backend",
                           "--model",
                           "--model-options",
                           "--num-machines",
                           "--num-processes",
                           "--epochs",
                           "--batch-size",
                           "--data-dir",
                           "--max-steps",
                           "--seed",
                           "--device",
                           "--optimizer",
                           "--lr",
                           "--momentum",
                           "--grad-accum",
                           "--grad-compression",
                           "--precision",
                           "--lr-schedule",
                           "--warmup-steps",
                           "--lr-step-size",
                           "--lr-gamma",
                           "--weight-decay",
                           "--clip-grad-norm",
                           "--loss-scale-init",
                           "--bucket-cap-mb",
                           "--drop-last",
                           "--no-eval",
                           "--mirror-parameters",
                           "--selftest"}) {
    EXPECT_EQ(defaults.count(flag), 1u) << flag;
  }
  // Settings of one machine only are not compared.
  for (const char* flag : {"--machine-id", "--master-addr", "--log-dir", "--metrics",
                           "--backend-options", "--threads-per-worker", "--job-token"}) {
    EXPECT_EQ(defaults.count(flag), 0u) << flag;
  }
  EXPECT_EQ(defaults.at("--lr"), "0.5");
  EXPECT_EQ(defaults.at("--model-options"), "(none)");
  EXPECT_EQ(defaults.at("--drop-last"), "off");
  EXPECT_EQ(defaults.at("--no-eval"), "off");
  const auto changed = Settings({"--lr", "0.1", "--model", "mlp", "--model-options", "hidden=64",
                                 "--drop-last", "--no-eval", "--num-machines", "2:3",
                                 "--batch-size", "12", "--checkpoint-dir", "/c"});
  EXPECT_EQ(changed.at("--lr"), "0.1");
  EXPECT_EQ(changed.at("--model"), "mlp");
  EXPECT_EQ(changed.at("--model-options"), "hidden=64");
  EXPECT_EQ(changed.at("--drop-last"), "on");
  EXPECT_EQ(changed.at("--no-eval"), "on");
  EXPECT_EQ(changed.at("--num-machines"), "2:3");
}

TEST_F(ClusterOptionsTest, AHostfileJobIsFixed) {
  EXPECT_EQ(ErrorOf({"--hostfile", "h", "--num-machines", "1:2", "--batch-size", "2",
                     "--checkpoint-dir", "/c"}),
            "--hostfile starts one launcher on each of its hosts: give --num-machines as one "
            "number (or leave it out), not the range 1:2");
  // What another machine's launcher is started with: neither the hostfile nor the token.
  const Options options =
      MustParse({"--hostfile", "h", "--ssh-options", "-p 22", "--job-token", "t", "--lr", "0.25"});
  std::string arguments;
  for (const std::string& argument : LauncherArguments(options)) arguments += argument + " ";
  EXPECT_EQ(arguments.find("--hostfile"), std::string::npos) << arguments;
  EXPECT_EQ(arguments.find("--ssh-options"), std::string::npos) << arguments;
  EXPECT_EQ(arguments.find("--job-token"), std::string::npos) << arguments;
  EXPECT_NE(arguments.find("--lr 0.25 "), std::string::npos) << arguments;
}

}  // namespace
}  // namespace dpl::cli

namespace dpl::cluster {
namespace {

TEST(RemoteCommandTest, SshRunsTheLauncherInTheSameFolderAndReadsTheTokenFromStdin) {
  const RemoteLaunch launch{"10.0.0.2",
                            "/work/my job",
                            "/opt/dpl/bin/launcher",
                            {"--lr", "0.5", "--model-options", "a=1,b='x'"},
                            {"-p", "2222"}};
  EXPECT_EQ(SshArguments(launch),
            (std::vector<std::string>{
                "ssh", "-o", "BatchMode=yes", "-p", "2222", "10.0.0.2",
                "cd '/work/my job' && IFS= read -r DPL_JOB_TOKEN && export DPL_JOB_TOKEN && "
                "/opt/dpl/bin/launcher --lr 0.5 --model-options 'a=1,b='\\''x'\\'''; exit $?"}));
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b;c"), "'a b;c'");
  EXPECT_EQ(ShellQuote("--x=1,2"), "--x=1,2");
}

TEST(RemoteCommandTest, SshOptionsAreWordsAndExitStatusesAreExplained) {
  EXPECT_EQ(*SplitSshOptions(" -p 2222  -i /k "),
            (std::vector<std::string>{"-p", "2222", "-i", "/k"}));
  EXPECT_EQ(SplitSshOptions("-o 'A B'").status().message(),
            "--ssh-options '-o 'A B'': quotes and backslashes are not supported; give words apart "
            "by spaces, e.g. \"-p 2222 -i /path/key\"");
  EXPECT_EQ(DescribeSshExit(0), "exit code 0");
  EXPECT_EQ(DescribeSshExit(1), "exit code 1");
  EXPECT_EQ(DescribeSshExit(137), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(DescribeSshExit(255),
            "ssh failed (exit status 255: no connection, a refused login, or the connection was "
            "lost)");
}

}  // namespace
}  // namespace dpl::cluster
