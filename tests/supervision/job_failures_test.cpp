// Real training jobs that fail, end to end through the launcher binary: the job must stop soon,
// name the right root cause and leave no process behind.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/shell_capture.hpp"
#include "training/checkpoint.hpp"
#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// When `text` first appeared in `process`'s output, or nullopt if not within `timeout`.
std::optional<Clock::time_point> WaitForOutput(const LauncherProcess& process,
                                               const std::string& text,
                                               std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (Contains(process.Output(), text)) return Clock::now();
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

double Seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

class JobFailuresTest : public TrainingJobTest {
 protected:
  // A two-rank job with each case's flags must fail with the case's message, and no worker may
  // start.
  void ExpectRefusedBeforeAnyWorkerStarts(const std::vector<std::pair<Args, std::string>>& cases) {
    int index = 0;
    for (const auto& [flags, message] : cases) {
      Args args = Job("tcp", "mlp", 2, {"--master-port", "0", "--max-steps", "1"});
      args.insert(args.end(), flags.begin(), flags.end());
      LauncherProcess job(args, OutputPath(std::to_string(index++)));
      const auto status = job.Wait(30s);
      EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << job.Output();
      EXPECT_TRUE(Contains(job.Output(), "[launcher 0] error: job failed: " + message))
          << job.Output();
      EXPECT_FALSE(Contains(job.Output(), "[rank ")) << "a worker started:\n" << job.Output();
    }
  }
};

// A rank that fails outside a collective, with the default --backend-timeout (300 s): it must
// report at once, and its peer, waiting in an allreduce, must learn of it from the closed
// connections at once. Timed from rank 0's first step, two steps before rank 1 fails.
TEST_F(JobFailuresTest, GlooRankFailingOutsideACollectiveStopsTheJobAtOnce) {
  LauncherProcess job(Job("gloo", "faulty", 2,
                          {"--master-port", "0", "--log-interval", "1", "--model-options",
                           "fail_rank=1,fail_step=3"}),
                      OutputPath("m0"));
  const auto training = WaitForOutput(job, "training loss", 60s);
  ASSERT_TRUE(training) << job.Output();
  const auto status = job.Wait(400s);
  const double took = Seconds(Clock::now() - *training);
  RecordProperty("seconds_to_stop", std::to_string(took));
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_LT(took, 5.0) << "the job took " << took << " s to stop after rank 0's first step";
  EXPECT_TRUE(Contains(job.Output(),
                       "[rank 1] error: model plugin 'faulty' (" DPL_TEST_FAULTY_MODEL_DIR
                       "/libdpl_test_model_faulty.so) train_step failed with DPL_ERR_INTERNAL: "
                       "model \"faulty\": train_step fails on purpose on rank 1 at step 3"))
      << job.Output();
}

// Note [Root cause] in launcher/supervision/failure_naming.hpp: rank 1's model fails, rank 0 then
// loses it mid-collective and fails too, a moment later; the launcher must name rank 1 every
// time, however close the two exits are.
class RootCauseTest : public JobFailuresTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(RootCauseTest, TheRankWhoseModelFailedIsTheRootCauseNotItsPeer) {
  constexpr int kRuns = 12;
  for (int run = 0; run < kRuns; ++run) {
    LauncherProcess job(Job(GetParam(), "faulty", 2,
                            {"--master-port", "0", "--model-options", "fail_rank=1,fail_step=3"}),
                        OutputPath("run" + std::to_string(run)));
    const auto status = job.Wait(60s);
    const std::string output = job.Output();
    ASSERT_TRUE(ExitedWith(status, 1)) << Describe(status) << output;
    EXPECT_TRUE(Contains(output, "error: job failed: rank 1 (machine 0, local rank 1, pid "))
        << "run " << run << " of " << kRuns << ":\n"
        << output;
    EXPECT_TRUE(Contains(output,
                         ") failed first: exit code 1; the last lines of its log (the root "
                         "cause):"))
        << output;
    EXPECT_TRUE(Contains(output, "train_step fails on purpose on rank 1 at step 3")) << output;
  }
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, RootCauseTest, ::testing::Values("tcp", "gloo"));

// A launcher killed with SIGKILL takes its workers with it and leaves no failure behind; the other
// machine's workers then fail on the lost peers, and their launcher must name the vanished machine.
TEST_P(RootCauseTest, AKilledLauncherIsTheRootCauseOnTheOtherMachine) {
  constexpr int kRuns = 2;
  for (int run = 0; run < kRuns; ++run) {
    const Args shape = {"--num-machines",  "2",         "--log-interval", "1",
                        "--model-options", "step_ms=10"};
    Args args0 = Job(GetParam(), "faulty", 1, shape);
    args0.insert(args0.end(), {"--machine-id", "0", "--master-port", "0"});
    LauncherProcess machine0(args0, OutputPath("m0-run" + std::to_string(run)));
    const int port = machine0.WaitForStorePort();
    ASSERT_GT(port, 0) << machine0.Output();
    Args args1 = Job(GetParam(), "faulty", 1, shape);
    args1.insert(args1.end(), {"--machine-id", "1", "--master-port", std::to_string(port)});
    LauncherProcess machine1(args1, OutputPath("m1-run" + std::to_string(run)));
    ASSERT_TRUE(WaitForOutput(machine0, "training loss", 60s)) << machine0.Output();
    const std::vector<pid_t> workers1 = WorkersOf(machine1.pid());
    ASSERT_EQ(kill(machine1.pid(), SIGKILL), 0);
    machine1.Wait(5s);
    const auto status0 = machine0.Wait(30s);
    const std::string output = machine0.Output();
    EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << output;
    EXPECT_TRUE(Contains(output,
                         "error: job failed: machine 1 vanished: its launcher stopped answering "
                         "(no heartbeat in the rendezvous store for 1500 ms: killed, or the "
                         "machine or the network to it is down); after it, rank 0 (machine 0, "
                         "local rank 0, pid "))
        << output;
    EXPECT_TRUE(Contains(output, "failed: exit code 3 (it lost a peer or the rendezvous store)"))
        << output;
    EXPECT_FALSE(Contains(output, "failed first")) << output;
    EXPECT_TRUE(WaitUntilGone(workers1, 5s)) << "a worker outlived its SIGKILLed launcher";
  }
}

// Machine 0's rank fails and the job has no restart left: machine 0 keeps its store up until
// machine 1 saw the failure, so machine 1 names the root cause instead of a lost store.
TEST_P(RootCauseTest, TheOtherMachineNamesTheRootCauseWhenMachineZerosRankFails) {
  const Args shape = {"--num-machines", "2", "--model-options", "fail_rank=0,fail_step=3"};
  Args args0 = Job(GetParam(), "faulty", 1, shape);
  args0.insert(args0.end(), {"--machine-id", "0", "--master-port", "0"});
  LauncherProcess machine0(args0, OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  Args args1 = Job(GetParam(), "faulty", 1, shape);
  args1.insert(args1.end(), {"--machine-id", "1", "--master-port", std::to_string(port)});
  LauncherProcess machine1(args1, OutputPath("m1"));
  const auto status1 = machine1.Wait(60s);
  const auto status0 = machine0.Wait(30s);
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0) << machine0.Output();
  const std::string output = machine1.Output();
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1) << output;
  EXPECT_TRUE(Contains(output, "error: job failed: the job failed elsewhere: rank 0 (machine 0, "))
      << output;
  EXPECT_TRUE(Contains(output, "train_step fails on purpose on rank 0 at step 3")) << output;
  EXPECT_FALSE(Contains(output, "lost the rendezvous store")) << output;
}

// An output that cannot be written fails every attempt the same way: no restart.
TEST_F(JobFailuresTest, AnUnwritableOutputIsNotRestarted) {
  const std::string missing = dir_ + "/missing";
  Args args = Job("tcp", "mlp", 1,
                  {"--master-port", "0", "--max-steps", "1", "--max-restarts", "3",
                   "--dump-parameters", missing});
  LauncherProcess job(args, OutputPath("job"));
  const auto status = job.Wait(30s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << job.Output();
  EXPECT_TRUE(Contains(job.Output(), "[launcher 0] error: job failed: --dump-parameters " +
                                         missing + ": no such folder; create it first"))
      << job.Output();
  EXPECT_FALSE(Contains(job.Output(), "restarting the job")) << job.Output();
}

// A run resumed from a checkpoint at --max-steps has nothing left to train, however often.
TEST_F(JobFailuresTest, ResumingAtMaxStepsTrainsNoStep) {
  const std::string checkpoints = dir_ + "/checkpoints";
  const Args args = Job("tcp", "mlp", 2,
                        {"--master-port", "0", "--max-steps", "120", "--checkpoint-dir",
                         checkpoints, "--log-interval", "1000"});
  LauncherProcess first(args, OutputPath("first"));
  ASSERT_TRUE(ExitedWith(first.Wait(120s), 0)) << first.Output();
  EXPECT_TRUE(Contains(first.Output(), "training done: 120 steps")) << first.Output();
  const std::string at_limit = checkpoints + "/" + training::CheckpointFileName(120);
  for (int again = 0; again < 2; ++again) {
    Args resumed = args;
    resumed.push_back("--resume");
    LauncherProcess run(resumed, OutputPath("resumed" + std::to_string(again)));
    ASSERT_TRUE(ExitedWith(run.Wait(120s), 0)) << run.Output();
    EXPECT_TRUE(Contains(run.Output(), "resumed from " + at_limit)) << run.Output();
    EXPECT_TRUE(Contains(run.Output(),
                         "training done: nothing was left to train (the run resumed at step 120, "
                         "its end)"))
        << run.Output();
    EXPECT_FALSE(Contains(run.Output(), "final loss")) << run.Output();
    auto newest = training::NewestCheckpoint(checkpoints);
    ASSERT_TRUE(newest.ok()) << newest.status().message();
    EXPECT_EQ(*newest, at_limit);
    auto state = training::ReadCheckpoint(at_limit);
    ASSERT_TRUE(state.ok()) << state.status().message();
    EXPECT_EQ(state->global_step, 120);
  }
}

// Note [Stop and preemption signals]: a scheduler's SIGTERM stops a run without checkpoints at
// once; the failure says that nothing was saved and what would have saved it.
TEST_F(JobFailuresTest, ASigtermToARunWithoutCheckpointsSaysNothingWasSaved) {
  LauncherProcess job(Job("tcp", "mlp", 1, {"--master-port", "0", "--max-steps", "1000000"}),
                      OutputPath("sigterm"));
  ASSERT_TRUE(WaitForWorkers(job.pid(), 1, 30s)) << job.Output();
  ASSERT_EQ(kill(job.pid(), SIGTERM), 0);
  const auto status = job.Wait(30s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << job.Output();
  EXPECT_TRUE(Contains(job.Output(),
                       "the launcher of machine 0 was stopped by signal 15 (SIGTERM) (the run "
                       "writes no checkpoints, so nothing was saved; with --checkpoint-dir, "
                       "SIGTERM and SIGUSR1 checkpoint the step and exit 75)"))
      << job.Output();
}

// Note [A preemption instead of a restart] in launcher/supervision/attempt.cpp: a worker dies, and
// the scheduler's SIGTERM comes before the restart: the job ends as preempted (75), which a
// requeue resumes from the newest checkpoint, not as failed (1).
TEST_F(JobFailuresTest, APreemptionDuringARestartEndsTheJobAsPreempted) {
  LauncherProcess job(Job("tcp", "mlp", 2,
                          {"--master-port", "0", "--max-steps", "1000000", "--max-restarts", "2",
                           "--checkpoint-dir", dir_ + "/checkpoints", "--checkpoint-every", "5"}),
                      OutputPath("preempted-restart"));
  const std::string first = dir_ + "/checkpoints/checkpoint-0000000005.pt";
  for (int i = 0; i < 6000 && !std::filesystem::exists(first); ++i) usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(first)) << job.Output();
  const pid_t rank1 = WorkerWithRank(job.pid(), 1);
  ASSERT_GT(rank1, 0) << job.Output();
  ASSERT_EQ(kill(rank1, SIGKILL), 0);
  ASSERT_EQ(kill(job.pid(), SIGTERM), 0);
  const auto status = job.Wait(60s);
  EXPECT_TRUE(ExitedWith(status, 75)) << Describe(status) << job.Output();
}

// Note [Outputs checked first] in launcher/supervision/output_check.hpp.
TEST_F(JobFailuresTest, UnwritableOutputsAreRefusedBeforeAnyWorkerStarts) {
  const std::string file = dir_ + "/train-labels-idx1-ubyte";
  const std::string missing = dir_ + "/missing";
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--metrics", missing + "/m.jsonl"},
       "--metrics " + missing + "/m.jsonl: the folder " + missing +
           " does not exist; create it first"},
      {{"--metrics", dir_}, "--metrics " + dir_ + ": this is a folder; name a file"},
      {{"--metrics", "/dev/stdout"},
       "--metrics /dev/stdout: a worker's standard streams are the launcher's log relay, so the "
       "lines would come stamped into the log, not onto the launcher's standard output; name a "
       "file and read it as it grows (tail -f FILE)"},
      {{"--dump-parameters", missing},
       "--dump-parameters " + missing + ": no such folder; create it first"},
      {{"--dump-parameters", file}, "--dump-parameters " + file + ": this is a file, not a folder"},
      {{"--checkpoint-dir", missing + "/checkpoints"},
       "--checkpoint-dir " + missing + "/checkpoints: its parent folder " + missing +
           " does not exist; create it first"},
      {{"--checkpoint-dir", file}, "--checkpoint-dir " + file + ": this is a file, not a folder"},
      {{"--log-dir", missing + "/logs"},
       "--log-dir " + missing + "/logs: its parent folder " + missing +
           " does not exist; create it first"},
      {{"--init-from", missing + "/model.pt"},
       "--init-from " + missing +
           "/model.pt: No such file or directory; name a state dict file (torch.save of {name: "
           "tensor})"},
  };
  ExpectRefusedBeforeAnyWorkerStarts(cases);
  EXPECT_FALSE(std::filesystem::exists(missing));
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Note [One file, one flag] in launcher/supervision/output_check.cpp: one file for two outputs,
// or for an output and what the run reads (a file of the data among them), however the paths are
// spelled.
TEST_F(JobFailuresTest, OneFileForTwoFlagsIsRefusedBeforeAnyWorkerStarts) {
  const std::string model = dir_ + "/model.pt", config = dir_ + "/run.cfg";
  const std::string labels = dir_ + "/train-labels-idx1-ubyte";
  std::ofstream(model) << "a model";
  std::ofstream(config) << "max-steps = 1\n";
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--export", dir_ + "/e.pt", "--export-best", dir_ + "/./e.pt", "--eval-every", "2"},
       "--export and --export-best name the same file, " + dir_ +
           "/e.pt: each would overwrite the other's; give --export-best another file"},
      {{"--metrics", dir_ + "/m.jsonl", "--trace",
        dir_ + "/../" + std::filesystem::path(dir_).filename().string() + "/m.jsonl"},
       "--metrics and --trace name the same file, " + dir_ +
           "/m.jsonl: each would overwrite the other's; give --trace another file"},
      {{"--init-from", model, "--export", model},
       "--export and --init-from name the same file, " + model +
           ": the run would replace the file it reads; give --export another file"},
      {{"--config", config, "--metrics", config},
       "--metrics and --config name the same file, " + config +
           ": the run would replace the file it reads; give --metrics another file"},
      {{"--export", labels},
       "--export " + labels + " is a file of --data-dir " + dir_ +
           ", which the run reads: writing --export there would replace it; give --export a file "
           "outside the data"},
  };
  const std::string labels_before = ReadWhole(labels);
  ExpectRefusedBeforeAnyWorkerStarts(cases);
  EXPECT_EQ(ReadWhole(model), "a model");
  EXPECT_EQ(ReadWhole(config), "max-steps = 1\n");
  EXPECT_EQ(ReadWhole(labels), labels_before);

  // An earlier run's export in the data's folder (--data-dir .) is written again.
  const std::string exported = dir_ + "/exported.pt";
  const auto run = [&](const std::string& name) {
    Args args = Job("tcp", "mlp", 2, {"--master-port", "0", "--max-steps", "1"});
    args.insert(args.end(), {"--export", exported});
    LauncherProcess job(args, OutputPath(name));
    const auto status = job.Wait(60s);
    return std::make_pair(status, job.Output());
  };
  const auto first = run("export-first");
  ASSERT_TRUE(ExitedWith(first.first, 0)) << first.second;
  const auto again = run("export-again");
  EXPECT_TRUE(ExitedWith(again.first, 0)) << again.second;
}

// A small tmpfs mounted for the test (root only), unmounted at the end.
class SmallFilesystem {
 public:
  explicit SmallFilesystem(const std::string& path) : path_(path) {
    std::filesystem::create_directories(path);
    mounted_ = ::mount("tmpfs", path.c_str(), "tmpfs", 0, "size=64k") == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallFilesystem() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  // Writes a file until the filesystem has no space left.
  void Fill() const {
    std::ofstream filler(path_ + "/filler", std::ios::binary);
    const std::vector<char> block(4096, 'x');
    for (int i = 0; i < 1000 && filler; ++i) filler.write(block.data(), block.size()).flush();
  }

 private:
  std::string path_;
  bool mounted_ = false;
  std::string error_;
};

TEST_F(JobFailuresTest, AFullDiskIsRefusedBeforeAnyWorkerStarts) {
  const std::string full = dir_ + "/full";
  SmallFilesystem disk(full);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << disk.error();
  disk.Fill();
  const std::string reason = "cannot write in " + full +
                             ": No space left on device; free space there or choose another "
                             "folder";
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--log-dir", full + "/logs"}, "--log-dir " + full + "/logs: " + reason},
      {{"--checkpoint-dir", full}, "--checkpoint-dir " + full + ": " + reason},
      {{"--dump-parameters", full}, "--dump-parameters " + full + ": " + reason},
      {{"--metrics", full + "/m.jsonl"}, "--metrics " + full + "/m.jsonl: " + reason},
  };
  ExpectRefusedBeforeAnyWorkerStarts(cases);
}

// A model plugin that crashes in create takes down only the worker loader's check (Note [Refused
// before the workers start]): the job is refused, saying so, no worker starts, and a restart,
// which would fail the same way, is not tried.
TEST_F(JobFailuresTest, AModelThatCrashesInCreateIsRefusedBeforeAnyWorkerStarts) {
  LauncherProcess job(
      Job("tcp", "faulty", 2,
          {"--master-port", "0", "--max-restarts", "2", "--model-options", "abort_in_create=1"}),
      OutputPath("m0"));
  const auto status = job.Wait(30s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << job.Output();
  EXPECT_TRUE(Contains(job.Output(),
                       "[launcher 0] error: job failed: the model plugin 'faulty' crashed while "
                       "creating the model (Aborted); no worker was started"))
      << job.Output();
  EXPECT_FALSE(Contains(job.Output(), "[rank ")) << "a worker started:\n" << job.Output();
  EXPECT_FALSE(Contains(job.Output(), "restarting the job")) << job.Output();
}

TEST_F(JobFailuresTest, ALogDiskThatFillsUpFailsTheJobNamingTheFile) {
  const std::string logs = dir_ + "/logs";
  SmallFilesystem disk(logs);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << disk.error();
  LauncherProcess job(Job("tcp", "faulty", 2,
                          {"--master-port", "0", "--log-dir", logs, "--log-interval", "1",
                           "--model-options", "step_ms=2"}),
                      OutputPath("m0"));
  ASSERT_TRUE(WaitForOutput(job, "training loss", 60s)) << job.Output();
  disk.Fill();
  const auto status = job.Wait(20s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_TRUE(Contains(job.Output(), "[launcher 0] error: job failed: cannot write the log file " +
                                         logs + "/rank-0.log (--log-dir " + logs +
                                         "): No space left on device; free space there or pass "
                                         "another --log-dir"))
      << job.Output();
}

// A stopped worker cannot act on SIGTERM: the launcher must SIGKILL it at once, not after the
// grace period (5 s) the others get.
TEST_F(JobFailuresTest, AStoppedWorkerIsKilledAtOnce) {
  for (const bool terminate_launcher : {true, false}) {
    // Machine 1 never comes, so the workers wait in the join barrier.
    LauncherProcess machine0(
        {"--selftest", "--num-machines", "2", "--machine-id", "0", "--num-processes", "2",
         "--master-port", "0", "--batch-size", "4", "--rendezvous-timeout", "30"},
        OutputPath(terminate_launcher ? "sigterm" : "kill"));
    ASSERT_TRUE(WaitForWorkers(machine0.pid(), 2, 10s)) << machine0.Output();
    const std::vector<pid_t> workers = WorkersOf(machine0.pid());
    const pid_t stopped = WorkerWithRank(machine0.pid(), 1);
    ASSERT_GT(stopped, 0);
    ASSERT_EQ(kill(stopped, SIGSTOP), 0);
    const auto start = Clock::now();
    if (terminate_launcher) {
      ASSERT_EQ(kill(machine0.pid(), SIGTERM), 0);
    } else {
      ASSERT_EQ(kill(WorkerWithRank(machine0.pid(), 0), SIGKILL), 0);
    }
    const auto status = machine0.Wait(10s);
    const double took = Seconds(Clock::now() - start);
    RecordProperty(
        terminate_launcher ? "seconds_to_stop_after_sigterm" : "seconds_to_stop_after_kill",
        std::to_string(took));
    EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status) << machine0.Output();
    EXPECT_LT(took, 2.5) << "the job took " << took << " s to stop";
    EXPECT_TRUE(WaitUntilGone(workers, 1s));
  }
}

// What a program prints is the job's result: when the launcher cannot write it (standard output on
// a full disk, here /dev/full) it says so once and the job does not end with 0, as the program's
// own print would fail.
TEST_F(JobFailuresTest, AProgramsOutputThatCannotBeWrittenFailsTheJob) {
  int exit_code = -1;
  const std::string output =
      testing::Capture(std::string(DPL_TEST_LAUNCHER) +
                           " --master-port 0 --num-processes 2 -- sh -c 'echo hello' 2>&1 "
                           ">/dev/full",
                       &exit_code);
  EXPECT_EQ(exit_code, 1) << output;
  EXPECT_EQ(Occurrences(output,
                        "error: cannot write to standard output (No space left on "
                        "device): what the programs print from here on is lost"),
            1)
      << output;
  EXPECT_TRUE(Contains(output,
                       "error: the job's standard output could not be written (No space "
                       "left on device); part of what its programs printed is lost"))
      << output;
}
}  // namespace
}  // namespace dpl::test
