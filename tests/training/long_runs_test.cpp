// What long runs rely on, through the launcher with the test model plugin "scaled"
// (scaled_model.cpp): --keep-checkpoints (Note [Checkpoint retention]) and a checkpoint write
// killed with SIGKILL.
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

}  // namespace
}  // namespace dpl::test
