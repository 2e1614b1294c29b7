// A real Slurm of one node on this machine (Debian's slurm-wlm and munge, a configuration written
// here, the daemons started by the test): `srun -N1 launcher --num-processes 2 ...` and an sbatch
// script that runs it with srun train with no rendezvous flag, and a program run as the workers
// of a step with torchrun's variables. Needs root (the daemons run as
// root); skipped with a message otherwise. Multi-node Slurm variables are the unit tests'
// (cluster/).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cluster_test_support.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

bool Installed(const char* program) {
  return Quietly(std::string("command -v ") + program);
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// munged, slurmctld and slurmd in the foreground as children of the test, with their state in a
// folder of their own and ports of their own, so that nothing of a Slurm installed here is used.
class SlurmCluster {
 public:
  SlurmCluster() {
    char pattern[] = "/tmp/dpl-slurm-XXXXXX";
    dir_ = mkdtemp(pattern);
    chmod(dir_.c_str(), 0755);  // munged checks every folder above its socket
    for (const char* sub : {"munge", "run", "state", "spool", "log"}) {
      std::filesystem::create_directories(dir_ + "/" + sub);
    }
    chmod((dir_ + "/munge").c_str(), 0700);
    chmod((dir_ + "/run").c_str(), 0755);
    const std::string key = dir_ + "/munge/munge.key";
    Quietly("dd if=/dev/urandom of=" + key + " bs=1024 count=1 && chmod 400 " + key);
    WriteConfig();
    setenv("SLURM_CONF", config_.c_str(), 1);
    munged_ = std::make_unique<ChildProcess>(
        Args{"munged", "-F", "--socket=" + dir_ + "/run/munge.socket", "--key-file=" + key,
             "--pid-file=" + dir_ + "/munge/munged.pid", "--log-file=" + dir_ + "/log/munged.log",
             "--seed-file=" + dir_ + "/munge/munged.seed"},
        dir_ + "/log/munged.out");
    for (int i = 0; i < 500 && !std::filesystem::exists(dir_ + "/run/munge.socket"); ++i) {
      usleep(10000);
    }
    controller_ = std::make_unique<ChildProcess>(Args{"slurmctld", "-D", "-f", config_},
                                                 dir_ + "/log/slurmctld.out");
    node_ = std::make_unique<ChildProcess>(Args{"slurmd", "-D", "-f", config_},
                                           dir_ + "/log/slurmd.out");
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!ready_ && std::chrono::steady_clock::now() < deadline) {
      ready_ = Quietly("sinfo -h -o %T | grep -q idle");
      if (!ready_) usleep(100000);
    }
  }
  ~SlurmCluster() {
    node_.reset();
    controller_.reset();
    munged_.reset();
    unsetenv("SLURM_CONF");
    std::filesystem::remove_all(dir_);
  }

  bool ready() const { return ready_; }
  const std::string& dir() const { return dir_; }
  // What the daemons logged, for a failure's message.
  std::string Logs() const {
    std::string logs;
    for (const char* name : {"slurmctld.log", "slurmd.log", "munged.log", "slurmctld.out",
                             "slurmd.out", "munged.out"}) {
      logs += std::string("--- ") + name + "\n" + ReadFile(dir_ + "/log/" + name);
    }
    return logs;
  }

 private:
  void WriteConfig() {
    config_ = dir_ + "/slurm.conf";
    const std::string host = HostName();
    std::ofstream conf(config_);
    conf << "ClusterName=dpltest\n"
         << "SlurmctldHost=" << host << "(127.0.0.1)\n"
         << "SlurmctldPort=" << FreePort() << "\nSlurmdPort=" << FreePort() << "\n"
         << "SlurmUser=root\nSlurmdUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << dir_ << "/run/munge.socket\n"
         << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool\n"
         << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_
         << "/slurmd.pid\n"
         << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\nSlurmdLogFile=" << dir_
         << "/log/slurmd.log\n"
         // No cgroups: a container may not delegate them.
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
         << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
         << "SwitchType=switch/none\nMpiDefault=none\n"
         << "SchedulerType=sched/builtin\nSelectType=select/linear\nReturnToService=2\n"
         // The store's port comes from the job id: another run of this test gets other ids.
         << "FirstJobId=" << 1 + getpid() % 900 << "\n"
         << "NodeName=" << host
         << " NodeAddr=127.0.0.1 CPUs=" << std::thread::hardware_concurrency() << " State=UNKNOWN\n"
         << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  }

  std::string dir_, config_;
  std::unique_ptr<ChildProcess> munged_, controller_, node_;
  bool ready_ = false;
};

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!IsRoot() || !Installed("slurmctld") || !Installed("slurmd") || !Installed("srun") ||
        !Installed("munged")) {
      return;
    }
    cluster_ = new SlurmCluster();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "a Slurm of its own needs root (munged, slurmctld, slurmd)";
    if (cluster_ == nullptr) {
      GTEST_SKIP() << "Debian's slurm-wlm and munge are not installed (tools/setup.sh adds them)";
    }
    ASSERT_TRUE(cluster_->ready()) << "the one-node Slurm did not come up\n" << cluster_->Logs();
  }
  static SlurmCluster* cluster_;
};

SlurmCluster* SlurmTest::cluster_ = nullptr;

// What the launcher must say of a Slurm step of one node, and that it trained.
void ExpectTrainedUnderSlurm(const std::string& output) {
  const std::string first_line = FirstLine(output);
  EXPECT_EQ(first_line.rfind("[launcher 0] Slurm job ", 0), 0u) << output;
  EXPECT_TRUE(Contains(first_line,
                       " step 0: 1 machines (SLURM_STEP_NUM_NODES), machine 0 "
                       "(SLURM_NODEID), master " +
                           HostName() + " (first of SLURM_STEP_NODELIST), port "))
      << output;
  EXPECT_TRUE(Contains(first_line, "job token from SLURM_JOB_ID and SLURM_STEP_ID")) << output;
  EXPECT_TRUE(Contains(output, "[launcher 0] rendezvous store listening on port 2")) << output;
  EXPECT_TRUE(Contains(output, "[rank 0] training done: 20 steps")) << output;
  EXPECT_TRUE(Contains(output, "[launcher 0] all 2 workers of machine 0 finished")) << output;
}

TEST_F(SlurmTest, SrunStartsTheLauncherWithoutRendezvousFlags) {
  JobFolder job;
  LauncherProcess launcher(Concat({"--num-processes", "2"}, job.Training(20)), OutputPath("srun"),
                           {"srun", "-N1"});
  const auto status = launcher.Wait(60s);
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << launcher.Output() << cluster_->Logs();
  ExpectTrainedUnderSlurm(launcher.Output());
  EXPECT_TRUE(ReadFloats(job.Params(0)) == ReadFloats(job.Params(1)));
}

// The state of job `id` as `scontrol -o show job` prints it.
std::string ShowJob(const std::string& id) {
  ChildProcess show({"scontrol", "-o", "show", "job", id}, OutputPath("scontrol"));
  while (!show.Exited()) usleep(5000);
  return show.Output();
}

// Submits `script` with sbatch and `options`; the job id, or "" (with why in `error`).
std::string Submit(const std::string& script, const Args& options, std::string* error) {
  ChildProcess sbatch(Concat(Concat({"sbatch", "--parsable", "-N1"}, options), {script}),
                      OutputPath("sbatch"));
  for (int i = 0; i < 1000 && !sbatch.Exited(); ++i) usleep(10000);
  if (!sbatch.Succeeded()) {
    *error = sbatch.Output();
    return "";
  }
  return sbatch.Output().substr(0, sbatch.Output().find_first_of(";\n"));
}

// A batch script that runs `launcher_arguments` with srun.
void WriteBatchScript(const std::string& path, const Args& launcher_arguments) {
  std::ofstream file(path);
  file << "#!/bin/sh\nexec srun";
  for (const std::string& argument : Concat({DPL_TEST_LAUNCHER}, launcher_arguments)) {
    file << " '" << argument << "'";
  }
  file << "\n";
}

// Polls job `id` until it leaves the pending and running states (true) or `timeout` passes.
bool WaitForJobEnd(const std::string& id, std::chrono::seconds timeout, std::string* state) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    *state = ShowJob(id);
    if (!Contains(*state, "JobState=PENDING") && !Contains(*state, "JobState=RUNNING") &&
        !Contains(*state, "JobState=CONFIGURING") && !Contains(*state, "JobState=COMPLETING") &&
        !Contains(*state, "JobState=REQUEUED")) {
      return true;
    }
    usleep(50000);
  }
  return false;
}

TEST_F(SlurmTest, AnSbatchScriptRunsTheSameWithSrun) {
  JobFolder job;
  const std::string script = job.path() + "/job.sh", output = job.path() + "/job.out";
  {
    std::ofstream file(script);
    file << "#!/bin/sh\nexec srun";
    for (const std::string& argument :
         Concat({DPL_TEST_LAUNCHER, "--num-processes", "2"}, job.Training(20))) {
      file << " '" << argument << "'";
    }
    file << "\n";
  }
  // Not `sbatch --wait`, which looks at the job only every few seconds.
  ChildProcess sbatch({"sbatch", "--parsable", "-N1", "-o", output, script}, OutputPath("sbatch"));
  for (int i = 0; i < 1000 && !sbatch.Exited(); ++i) usleep(10000);
  ASSERT_TRUE(sbatch.Succeeded()) << sbatch.Output() << cluster_->Logs();
  const std::string job_id = sbatch.Output().substr(0, sbatch.Output().find_first_of(";\n"));
  std::string state;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    ChildProcess show({"scontrol", "-o", "show", "job", job_id}, OutputPath("scontrol"));
    while (!show.Exited()) usleep(5000);
    state = show.Output();
    if (!Contains(state, "JobState=PENDING") && !Contains(state, "JobState=RUNNING") &&
        !Contains(state, "JobState=CONFIGURING") && !Contains(state, "JobState=COMPLETING")) {
      break;
    }
    usleep(50000);
  }
  EXPECT_TRUE(Contains(state, "JobState=COMPLETED")) << state << ReadFile(output);
  EXPECT_TRUE(Contains(state, " ExitCode=0:0")) << state;
  ExpectTrainedUnderSlurm(ReadFile(output));
}

// Note [Slurm requeue] in launcher/cluster/environment.cpp: `scontrol requeue` of a running job
// sends its processes SIGTERM; every rank writes the checkpoint of one step and the launcher exits
// with the preempted status; Slurm runs the batch script again, and the launcher resumes from that
// checkpoint and finishes.
TEST_F(SlurmTest, ARequeuedJobResumesFromTheCheckpointItsPreemptionWrote) {
  JobFolder job;
  const std::string script = job.path() + "/job.sh", output = job.path() + "/job.out";
  const std::string checkpoints = job.path() + "/checkpoints";
  Args training = job.Training(4000);
  *(std::find(training.begin(), training.end(), "--log-interval") + 1) = "1";
  WriteBatchScript(script,
                   Concat({"--num-processes", "2", "--checkpoint-dir", checkpoints}, training));
  std::string error;
  const std::string id = Submit(script, {"--requeue", "--open-mode=append", "-o", output}, &error);
  ASSERT_FALSE(id.empty()) << error << cluster_->Logs();
  // Mid-run: 50 steps logged, far from the 4000.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (Occurrences(ReadFile(output), "training loss") < 50) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << ReadFile(output) << cluster_->Logs();
    usleep(10000);
  }
  ASSERT_TRUE(Quietly("scontrol requeue " + id)) << cluster_->Logs();
  // A requeued job is eligible again only after a while; make it eligible now.
  for (int i = 0; i < 100 && !Contains(ShowJob(id), "JobState=PENDING"); ++i) usleep(100000);
  Quietly("scontrol update JobId=" + id + " StartTime=now");
  std::string state;
  ASSERT_TRUE(WaitForJobEnd(id, 120s, &state)) << state << ReadFile(output) << cluster_->Logs();
  const std::string text = ReadFile(output);
  EXPECT_TRUE(Contains(state, "JobState=COMPLETED")) << state << text;
  EXPECT_TRUE(Contains(state, "Restarts=1")) << state;
  const std::regex preempted("every rank stops after step ([0-9]+); its checkpoint is (\\S+)");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(text, match, preempted)) << text;
  const std::string checkpoint = match[2];
  EXPECT_TRUE(Contains(text,
                       "requeued (SLURM_RESTART_COUNT=1): resumes from the newest "
                       "checkpoint of --checkpoint-dir"))
      << text;
  EXPECT_TRUE(Contains(text, "[rank 0] resumed from " + checkpoint + " at ")) << text;
  EXPECT_TRUE(Contains(text, "[rank 0] training done: 4000 steps")) << text;
}

TEST_F(SlurmTest, SrunRunsAProgramAsTheWorkersWithTorchrunsVariables) {
  LauncherProcess launcher({"--num-processes", "2", "--", "/bin/sh", "-c",
                            "echo \"rank $RANK of $WORLD_SIZE, local $LOCAL_RANK, store "
                            "$MASTER_ADDR:$MASTER_PORT\""},
                           OutputPath("srun"), {"srun", "-N1"});
  const auto status = launcher.Wait(60s);
  const std::string output = launcher.Output();
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << output << cluster_->Logs();
  EXPECT_EQ(FirstLine(output).rfind("[launcher 0] Slurm job ", 0), 0u) << output;
  const std::string store = " rank 0 serves torch's store at " + HostName() + ":";
  ASSERT_TRUE(Contains(output, store)) << output;
  const std::string port =
      std::to_string(std::stoi(output.substr(output.find(store) + store.size())));
  for (int rank : {0, 1}) {
    const std::string r = std::to_string(rank);
    EXPECT_TRUE(Contains(output, "[rank " + r + "] rank " + r + " of 2, local " + r + ", store " +
                                     HostName() + ":" + port))
        << output;
  }
}

}  // namespace
}  // namespace dpl::test
