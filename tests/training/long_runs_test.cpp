// What long runs rely on, through the launcher with the test model plugin "scaled"
// (scaled_model.cpp): --keep-checkpoints (Note [Checkpoint retention]), a checkpoint write
// killed with SIGKILL, --check-replicas (Note [Replica check]) and AdamW with its param groups.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "launcher_runs.hpp"
#include "training/checkpoint.hpp"

namespace dpl::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

bool PluginBuilt(const std::string& file) {
  return fs::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/" + file);
}

std::vector<std::string> FilesIn(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// 256 images, global batches of 16: 16 optimizer steps an epoch.
class LongRunTest : public LauncherRunTest {
 protected:
  void SetUp() override {
    if (!PluginBuilt("libdpl_dataset_idx.so") || !PluginBuilt("libdpl_backend_tcp.so") ||
        !PluginBuilt("libdpl_backend_gloo.so")) {
      GTEST_SKIP() << "the idx dataset or the tcp or gloo backend plugin is not built";
    }
    WriteData(256);
  }
  std::string Job(int processes, const std::string& optimizer = "--optimizer sgd --lr 0.002",
                  int batch = 16) const {
    return Data() +
           "--plugin-dir " DPL_TEST_SCALED_MODEL_DIR
           " --model scaled --no-eval --epochs 10 --batch-size " +
           std::to_string(batch) + " --num-processes " + std::to_string(processes) + " " +
           optimizer + " ";
  }
};

TEST_F(LongRunTest, KeepTwoLeavesTheNewestTwo) {
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult run = RunLauncher(Job(2) + "--backend tcp --max-steps 10 --checkpoint-every 2 " +
                              "--keep-checkpoints 2 --checkpoint-dir " + checkpoints);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(FilesIn(checkpoints),
            (std::vector<std::string>{"checkpoint-0000000008.pt", "checkpoint-0000000010.pt"}));
  // The default keeps five.
  const std::string more = dir_ + "/more";
  RunResult defaults =
      RunLauncher(Job(1) + "--max-steps 14 --checkpoint-every 2 " + "--checkpoint-dir " + more);
  ASSERT_EQ(defaults.exit_code, 0) << defaults.output;
  EXPECT_EQ(FilesIn(more),
            (std::vector<std::string>{"checkpoint-0000000006.pt", "checkpoint-0000000008.pt",
                                      "checkpoint-0000000010.pt", "checkpoint-0000000012.pt",
                                      "checkpoint-0000000014.pt"}));
}

// Waits (up to `timeout`) for a file whose name starts with `prefix` to be created in the folder
// `inotify` watches; returns its name, or "".
std::string WaitForCreated(int inotify, const std::string& prefix,
                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  alignas(inotify_event) char buffer[8192];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd ready{inotify, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    const ssize_t length = ::read(inotify, buffer, sizeof buffer);
    for (ssize_t offset = 0; offset < length;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
      const std::string name = event->len > 0 ? event->name : "";
      if (name.rfind(prefix, 0) == 0) return name;
      offset += ssize_t(sizeof(inotify_event) + event->len);
    }
  }
  return "";
}

// A checkpoint write killed with SIGKILL the moment its temporary file appears (so well before
// its 130 MB are written and renamed) leaves the two before it intact, and --resume continues
// from the newest of them; the next complete checkpoint removes the killed write's leftover.
TEST_F(LongRunTest, AKillDuringTheWriteLeavesThePreviousCheckpointsResumable) {
  const std::string checkpoints = dir_ + "/checkpoints";
  fs::create_directories(checkpoints);
  const int inotify = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(inotify, 0);
  ASSERT_GE(::inotify_add_watch(inotify, checkpoints.c_str(), IN_CREATE), 0);
  const std::string args = Job(1) + "--model-options ballast=16000000 --checkpoint-every 2 " +
                           "--keep-checkpoints 2 --checkpoint-dir " + checkpoints + " ";
  auto killed_run =
      std::async(std::launch::async, [&] { return RunLauncher(args + "--max-steps 40"); });
  const std::string temporary = WaitForCreated(inotify, "checkpoint-0000000006.pt.tmp.", 120s);
  ::close(inotify);
  ASSERT_FALSE(temporary.empty()) << killed_run.get().output;
  const pid_t writer = std::stoi(temporary.substr(temporary.rfind('.') + 1));
  ASSERT_EQ(::kill(writer, SIGKILL), 0);
  const RunResult killed = killed_run.get();
  EXPECT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_TRUE(Contains(killed.output, "killed by signal 9 (SIGKILL)")) << killed.output;
  ASSERT_EQ(FilesIn(checkpoints), (std::vector<std::string>{"checkpoint-0000000002.pt",
                                                            "checkpoint-0000000004.pt", temporary}))
      << "the kill must land before the rename: " << killed.output;
  for (const char* name : {"/checkpoint-0000000002.pt", "/checkpoint-0000000004.pt"}) {
    Result<training::CheckpointState> read = training::ReadCheckpoint(checkpoints + name);
    ASSERT_TRUE(read.ok()) << read.status().message();
  }

  RunResult resumed = RunLauncher(args + "--max-steps 8 --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(Contains(resumed.output,
                       "resumed from " + checkpoints + "/checkpoint-0000000004.pt at epoch 0"))
      << resumed.output;
  EXPECT_EQ(FilesIn(checkpoints),
            (std::vector<std::string>{"checkpoint-0000000006.pt", "checkpoint-0000000008.pt"}));
}

// Note [Checkpoints that do not stop training]: with a checkpoint of 130 MB due at every step the
// next one is due while the one before is still written: training waits for it, and rank 0 says
// so. Every checkpoint is complete at the end, and a run resumed from the newest ends bit for bit
// as the straight run does.
TEST_F(LongRunTest, ACheckpointDueWhileTheOneBeforeIsWrittenWaitsForItAndSaysSo) {
  const std::string checkpoints = dir_ + "/checkpoints";
  const std::string job = Job(1) + "--model-options ballast=16000000 ";
  RunResult straight = RunLauncher(job + "--max-steps 6 --dump-parameters " + Folder("straight"));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::vector<float> expected = ReadFloats(dir_ + "/straight/rank-0.bin");
  const std::string args =
      job + "--checkpoint-every 1 --keep-checkpoints 0 --checkpoint-dir " + checkpoints + " ";
  RunResult first = RunLauncher(args + "--max-steps 4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(Contains(first.output,
                       "the checkpoint of step 1 was still being written as step 2's "
                       "came due: training waited "))
      << first.output;
  EXPECT_TRUE(Contains(first.output, "checkpoint of step 4: " + checkpoints +
                                         "/checkpoint-0000000004.pt (written in "))
      << first.output;
  EXPECT_EQ(FilesIn(checkpoints),
            (std::vector<std::string>{"checkpoint-0000000001.pt", "checkpoint-0000000002.pt",
                                      "checkpoint-0000000003.pt", "checkpoint-0000000004.pt"}));
  for (const std::string& name : FilesIn(checkpoints)) {
    Result<training::CheckpointState> read = training::ReadCheckpoint(checkpoints + "/" + name);
    ASSERT_TRUE(read.ok()) << read.status().message();
  }
  RunResult resumed =
      RunLauncher(args + "--max-steps 6 --resume --dump-parameters " + Folder("resumed"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_GT(expected.size(), 1000u);
  EXPECT_TRUE(ReadFloats(dir_ + "/resumed/rank-0.bin") == expected);
}

// Note [Replica check]: rank 1's fc.bias[0] grows by 0.001 at its 25th step; the check of
// step 20 passes, that of step 30 fails on every rank naming rank 1 and the tensor, and the job
// is not restarted although --max-restarts allows it. Each rank updates its whole copy
// (--shard-optimizer off): sharded, the parts gathered after each step overwrite every copy, so
// a change outside a rank's own part does not last.
TEST_F(LongRunTest, AReplicaThatDiffersIsNamedAndTheJobFailsUnrestarted) {
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult run =
      RunLauncher(Job(3, "--optimizer sgd --lr 0.002 --shard-optimizer off", 48) +
                  "--backend gloo --model-options perturb_rank=1,perturb_step=25 " +
                  "--check-replicas 10 --max-steps 40 --max-restarts 2 --checkpoint-every 5 " +
                  "--checkpoint-dir " + checkpoints);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output,
                       "the replicas differ at step 30 (--check-replicas 10): rank 1 (fc.bias) "
                       "differs from rank 0; rank 2 agrees with rank 0; all agreed at step 20. "))
      << run.output;
  EXPECT_TRUE(Contains(run.output, "exit code 4 (a failure a restart would repeat)")) << run.output;
  EXPECT_FALSE(Contains(run.output, "restarting the job")) << run.output;
  // Step 30's checkpoint, due after the check, was not written.
  EXPECT_TRUE(fs::exists(checkpoints + "/checkpoint-0000000025.pt"));
  EXPECT_FALSE(fs::exists(checkpoints + "/checkpoint-0000000030.pt"));
}

// Without a fault the check passes at every step, through each host backend.
TEST_F(LongRunTest, IdenticalReplicasPassEveryCheck) {
  for (const char* backend : {"tcp", "gloo"}) {
    const std::string out = Folder(std::string("out-") + backend);
    RunResult run = RunLauncher(Job(2, "--optimizer adamw --lr 0.001") + "--backend " + backend +
                                " --check-replicas 1 --max-steps 12 --dump-parameters " + out);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(ReadFloats(out + "/rank-0.bin") == ReadFloats(out + "/rank-1.bin"));
  }
}

// --optimizer adamw decays fc.weight only and says so once; its checkpoint names torch's state,
// and a resume with other --betas is refused naming both values.
TEST_F(LongRunTest, AdamwSaysItsGroupsAndResumesOnlyWithItsBetas) {
  const std::string checkpoints = dir_ + "/checkpoints";
  const std::string args = Job(2, "--optimizer adamw --lr 0.001 --weight-decay 0.1") +
                           "--backend tcp --checkpoint-dir " + checkpoints + " ";
  RunResult first = RunLauncher(args + "--max-steps 4");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string said =
      "--weight-decay 0.1 (adamw, decoupled) on 1 tensor of two or more dimensions (7840 "
      "elements); none on 1 bias or norm weight (fc.bias) (10 elements); --decay-all decays "
      "every tensor";
  EXPECT_TRUE(Contains(first.output, said)) << first.output;
  EXPECT_EQ(first.output.find(said), first.output.rfind(said)) << "said once";
  const std::string checkpoint = checkpoints + "/checkpoint-0000000004.pt";
  Result<training::CheckpointState> state = training::ReadCheckpoint(checkpoint);
  ASSERT_TRUE(state.ok()) << state.status().message();
  EXPECT_EQ(state->optimizer_name, "adamw");
  std::vector<std::string> names;
  for (const auto& entry : state->optimizer_state)
    names.push_back(entry.parameter + "/" + entry.state);
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight/exp_avg", "fc.weight/exp_avg_sq",
                                             "fc.bias/exp_avg", "fc.bias/exp_avg_sq"}));

  RunResult other = RunLauncher(args + "--max-steps 8 --resume --betas 0.9,0.95");
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_TRUE(Contains(other.output, "checkpoint " + checkpoint +
                                         " was written with --betas 0.9,0.999 but this run has "
                                         "--betas 0.9,0.95"))
      << other.output;
  RunResult all = RunLauncher(args + "--max-steps 8 --resume --decay-all");
  EXPECT_TRUE(Contains(all.output,
                       "was written with --decay-all false but this run has "
                       "--decay-all true"))
      << all.output;
  RunResult same = RunLauncher(args + "--max-steps 8 --resume");
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

}  // namespace
}  // namespace dpl::test
