// --hostfile over real OpenSSH: two network namespaces joined by a veth pair as two hosts, an
// sshd in the second with a key made here, and the launcher run in the first with a hostfile of
// both addresses. The job trains on both (the backends bind the address that routes to machine
// 0), the job token shows in no command line, and kill -9 of the remote launcher stops the local
// one with a message naming the host. A program's ranks on the other host get the variables given
// with --env and those of the forwarded list, whose values show in no command line. Needs root;
// skipped with a message otherwise.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cluster_test_support.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "ssh-test-token-4f1d";

// Every process whose command line holds `part`.
std::vector<pid_t> ProcessesWithArgument(const std::string& part) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::string cmdline = ReadProcFile(pid, "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (Contains(cmdline, part)) found.push_back(pid);
  }
  closedir(proc);
  return found;
}

class SshHostfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (!IsRoot()) GTEST_SKIP() << "network namespaces and an sshd of its own need root";
    if (!Quietly("command -v ssh") || !std::filesystem::exists("/usr/sbin/sshd") ||
        !Quietly("command -v ssh-keygen")) {
      GTEST_SKIP() << "OpenSSH is not installed (openssh-server, openssh-client: tools/setup.sh)";
    }
    namespaces_ = std::make_unique<NamespacePair>(232);
    if (!namespaces_->ok()) GTEST_SKIP() << "cannot join two network namespaces by a veth pair";
    job_ = std::make_unique<JobFolder>();
    const std::string keys = job_->path();
    ASSERT_TRUE(Quietly("ssh-keygen -q -t ed25519 -N '' -f " + keys + "/host_key")) << keys;
    ASSERT_TRUE(Quietly("ssh-keygen -q -t ed25519 -N '' -f " + keys + "/user_key")) << keys;
    std::filesystem::copy_file(keys + "/user_key.pub", keys + "/authorized_keys");
    std::filesystem::create_directories("/run/sshd");  // sshd's privilege separation folder
    sshd_ = std::make_unique<ChildProcess>(
        Concat(namespaces_->In(1),
               {"/usr/sbin/sshd", "-D", "-e", "-f", "/dev/null", "-h", keys + "/host_key", "-o",
                "ListenAddress=" + namespaces_->address(1), "-o",
                "AuthorizedKeysFile=" + keys + "/authorized_keys", "-o", "StrictModes=no", "-o",
                "PidFile=none"}),
        OutputPath("sshd"));
    ASSERT_TRUE(sshd_->WaitForOutput("Server listening", 10s)) << sshd_->Output();
    hostfile_ = keys + "/hostfile";
    std::ofstream(hostfile_) << namespaces_->address(0) << " slots=2\n"
                             << namespaces_->address(1) << " slots=2\n";
  }
  void TearDown() override {
    sshd_.reset();
    job_.reset();
    namespaces_.reset();
  }

  // The launcher with --hostfile, in the first namespace, the token in its environment.
  std::unique_ptr<LauncherProcess> Run(int max_steps, const std::string& name,
                                       const std::string& backend = "tcp") {
    Args training = job_->Training(max_steps);
    *(std::find(training.begin(), training.end(), "--backend") + 1) = backend;
    return RunWith(training, name, {});
  }

  // The runner with `flags`, `environment` (NAME=value) added to its own.
  std::unique_ptr<LauncherProcess> RunWith(const Args& flags, const std::string& name,
                                           const Args& environment) {
    const Args args =
        Concat({"--hostfile", hostfile_, "--master-port", "29741", "--rendezvous-timeout", "30",
                "--ssh-options",
                "-i " + job_->path() +
                    "/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o "
                    "LogLevel=ERROR"},
               flags);
    return std::make_unique<LauncherProcess>(
        args, OutputPath(name),
        Concat(namespaces_->In(0),
               Concat({"env", std::string("DPL_JOB_TOKEN=") + kToken}, environment)));
  }

  std::unique_ptr<NamespacePair> namespaces_;
  std::unique_ptr<JobFolder> job_;
  std::unique_ptr<ChildProcess> sshd_;
  std::string hostfile_;
};

// Through gloo, which like tcp binds the address of the interface that routes to machine 0.
TEST_F(SshHostfileTest, TheJobTrainsOnBothHosts) {
  auto runner = Run(20, "runner", "gloo");
  const auto status = runner->Wait(90s);
  const std::string output = runner->Output();
  ASSERT_TRUE(ExitedWith(status, 0)) << Describe(status) << output << sshd_->Output();
  const std::string first = namespaces_->address(0), second = namespaces_->address(1);
  EXPECT_TRUE(Contains(output, "[hostfile] starting 2 machines: machine 0 (" + first +
                                   ") here, machine 1 (" + second + ") over ssh"))
      << output;
  EXPECT_TRUE(Contains(output, "[" + first + "] [rank 0] training done: 20 steps")) << output;
  EXPECT_TRUE(Contains(output, "[" + second + "] [launcher 1] all 2 workers of machine 1 finished"))
      << output;
  EXPECT_TRUE(Contains(output, "[hostfile] all 2 machines finished")) << output;
  // Ranks 0 and 2 run on different hosts and end with the same parameters.
  const std::vector<float> rank0 = ReadFloats(job_->Params(0));
  ASSERT_GT(rank0.size(), 100000u);
  EXPECT_TRUE(rank0 == ReadFloats(job_->Params(2)));
  EXPECT_TRUE(rank0 == ReadFloats(job_->Params(3)));
}

// The launchers of both machines once their workers run: the remote one runs with
// --exit-with-stdin, the local one without.
struct Launchers {
  pid_t local = -1;
  pid_t remote = -1;
};
// `job_folder` is this test's own: tests that run at the same time have launchers of their own.
Launchers FindLaunchers(const std::string& job_folder) {
  Launchers found;
  for (int i = 0; i < 3000 && (found.remote < 0 || found.local < 0); ++i) {
    for (pid_t pid : ProcessesWithArgument("--data-dir " + job_folder + " ")) {
      if (WorkersOf(pid).empty()) continue;
      (Contains(ReadProcFile(pid, "cmdline"), "--exit-with-stdin") ? found.remote : found.local) =
          pid;
    }
    std::this_thread::sleep_for(10ms);
  }
  return found;
}

TEST_F(SshHostfileTest, KillingTheRemoteLauncherStopsTheLocalOneNamingTheHost) {
  auto runner = Run(1000000, "runner");
  const Launchers launchers = FindLaunchers(job_->path());
  const pid_t remote = launchers.remote, local = launchers.local;
  ASSERT_GT(remote, 0) << runner->Output();
  ASSERT_GT(local, 0) << runner->Output();
  const std::vector<pid_t> local_workers = WorkersOf(local);
  EXPECT_TRUE(ProcessesWithArgument(kToken).empty()) << "the job token is in a command line";
  ASSERT_EQ(kill(remote, SIGKILL), 0);
  const auto status = runner->Wait(30s);
  const std::string output = runner->Output();
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output, "[hostfile] error: machine 1 (" + namespaces_->address(1) +
                                   ") ended: killed by signal 9 (SIGKILL)"))
      << output;
  EXPECT_TRUE(Contains(output, "[hostfile] error: job failed: ")) << output;
  EXPECT_TRUE(WaitUntilGone({local}, 1s)) << "the local launcher outlived the job";
  EXPECT_TRUE(WaitUntilGone(local_workers, 1s)) << "a local worker outlived the job";
}

TEST_F(SshHostfileTest, AnInterruptStopsEveryMachine) {
  auto runner = Run(1000000, "runner");
  const Launchers launchers = FindLaunchers(job_->path());
  ASSERT_GT(launchers.remote, 0) << runner->Output();
  ASSERT_GT(launchers.local, 0) << runner->Output();
  std::vector<pid_t> everything = WorkersOf(launchers.remote);
  for (pid_t pid : WorkersOf(launchers.local)) everything.push_back(pid);
  everything.insert(everything.end(), {launchers.local, launchers.remote});
  // SIGINT to the runner alone: the remote launcher learns of it only from its closed stdin.
  ASSERT_EQ(kill(runner->pid(), SIGINT), 0);
  const auto status = runner->Wait(30s);
  const std::string output = runner->Output();
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
  EXPECT_TRUE(Contains(output,
                       "[hostfile] error: stopped by signal 2 (SIGINT); stopping every "
                       "machine"))
      << output;
  EXPECT_TRUE(Contains(output, "[" + namespaces_->address(1) +
                                   "] [launcher 1] error: job failed: the launcher of machine 1 "
                                   "was stopped by signal 15 (SIGTERM)"))
      << output;
  EXPECT_TRUE(WaitUntilGone(everything, 1s)) << "a launcher or worker outlived the job";
}

TEST_F(SshHostfileTest, AProgramsRanksOnTheOtherHostGetTheForwardedVariables) {
  const std::string done = job_->path() + "/done";
  auto runner = RunWith(
      {"--env", "DPL_TEST_GIVEN=given value", "--env", "TEST_HOST_VALUE", "--", "/bin/sh", "-c",
       "echo \"rank=$RANK given=$DPL_TEST_GIVEN host=$TEST_HOST_VALUE nccl=$NCCL_TEST_SETTING\"; "
       "while [ ! -e \"$0\" ]; do sleep 0.05; done",
       done},
      "runner", {"NCCL_TEST_SETTING=nccl-4f2", "TEST_HOST_VALUE=host-9c1"});
  const std::string second = "[" + namespaces_->address(1) + "] [rank ";
  for (int rank : {2, 3}) {
    const std::string line = second + std::to_string(rank) + "] rank=" + std::to_string(rank) +
                             " given=given value host=host-9c1 nccl=nccl-4f2\n";
    for (int i = 0; i < 3000 && !Contains(runner->Output(), line); ++i) usleep(10000);
    EXPECT_TRUE(Contains(runner->Output(), line)) << runner->Output() << sshd_->Output();
  }
  // Their names, with those of this host's environment that the list takes.
  const std::string output = runner->Output();
  const size_t passing = output.find("[hostfile] passing ");
  ASSERT_NE(passing, std::string::npos) << output;
  const std::string line = output.substr(passing, output.find('\n', passing) - passing);
  for (const char* name : {" NCCL_TEST_SETTING,", " DPL_TEST_GIVEN,", " TEST_HOST_VALUE to "}) {
    EXPECT_TRUE(Contains(line, name)) << line;
  }
  EXPECT_TRUE(Contains(line, " to the other hosts (on ssh's standard input)")) << line;
  // The values are in the remote launcher's environment, in no command line.
  EXPECT_TRUE(ProcessesWithArgument("nccl-4f2").empty());
  EXPECT_TRUE(ProcessesWithArgument("host-9c1").empty());
  EXPECT_TRUE(ProcessesWithArgument(kToken).empty());
  pid_t remote = -1;
  for (pid_t pid : ProcessesWithArgument(done)) {
    const std::string cmdline = ReadProcFile(pid, "cmdline");
    if (cmdline.rfind(DPL_TEST_LAUNCHER, 0) == 0 && Contains(cmdline, "--exit-with-stdin")) {
      remote = pid;
    }
  }
  ASSERT_GT(remote, 0) << runner->Output();
  const std::string environment = ReadProcFile(remote, "environ");
  EXPECT_TRUE(Contains(environment,
                       std::string(1, '\0') + "DPL_TEST_GIVEN=given value" + std::string(1, '\0')));
  std::ofstream(done) << "done\n";
  const auto status = runner->Wait(60s);
  EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << runner->Output();
}

}  // namespace
}  // namespace dpl::test
