// The launchers of one elastic job on loopback, each in a process group of its own, for the tests
// that kill machines in the middle of a job (lost_machines_test.cpp, shrink_in_place_test.cpp,
// elastic_samples_test.cpp), and the moments of a step a test kills a machine at.
#pragma once

#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "training_jobs.hpp"

namespace dpl::test {

namespace elastic_jobs {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline bool WaitForPath(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  struct stat info {};
  while (::stat(path.c_str(), &info) != 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Blocks until a file or folder whose name holds ".tmp" (a checkpoint being written) appears in
// `folder`, at most `timeout`; its path, or "" if none came.
inline std::string WaitForCheckpointBeingWritten(const std::string& folder,
                                                 std::chrono::milliseconds timeout) {
  const int watch = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (watch < 0 || inotify_add_watch(watch, folder.c_str(), IN_CREATE) < 0) return "";
  const auto deadline = Clock::now() + timeout;
  std::string found;
  alignas(inotify_event) char buffer[4096];
  while (found.empty() && Clock::now() < deadline) {
    const ssize_t count = read(watch, buffer, sizeof buffer);
    if (count <= 0) {
      std::this_thread::sleep_for(100us);
      continue;
    }
    for (ssize_t at = 0; at < count;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      const std::string name = event->len > 0 ? event->name : "";
      if (Contains(name, ".tmp")) found = folder + "/" + name;  // a file, or a folder of parts
      at += ssize_t(sizeof(inotify_event) + event->len);
    }
  }
  close(watch);
  return found;
}

// Seconds from `since` until `part` occurs `count` times in `process`'s output (at most 60 s).
inline double SecondsUntil(const LauncherProcess& process, const std::string& part, int count,
                           Clock::time_point since) {
  // A line the output quotes (the last lines of a failed worker, indented) does not count.
  auto lines = [&] {
    const std::string output = process.Output();
    return Occurrences(output, " " + part) - Occurrences(output, "    " + part);
  };
  while (lines() < count && Clock::now() - since < 60s) {
    std::this_thread::sleep_for(5ms);
  }
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Holds rank 2 at `moment` (faulty_model.cpp), or waits for rank 0 to begin writing a checkpoint;
// "" once there, else what did not happen.
inline std::string ReachMoment(const std::string& moment, const std::string& holds,
                               const std::string& checkpoints) {
  if (moment == "checkpoint") {
    return WaitForCheckpointBeingWritten(checkpoints, 30s).empty()
               ? "no checkpoint was begun within 30 s"
               : "";
  }
  std::ofstream(holds + "/hold-2-" + moment).flush();
  if (!WaitForPath(holds + "/held-2-" + moment, 30s)) {
    return "rank 2 did not reach '" + moment + "' within 30 s";
  }
  std::remove((holds + "/held-2-" + moment).c_str());
  return "";
}

}  // namespace elastic_jobs
using elastic_jobs::ReachMoment;
using elastic_jobs::SecondsUntil;

class ElasticJobTest : public TrainingJobTest {
 protected:
  void TearDown() override {
    for (auto& launcher : launchers_) {
      if (launcher) kill(-launcher->pid(), SIGKILL);
    }
    launchers_.clear();
    TrainingJobTest::TearDown();
  }

  // One more machine of the job: a launcher with `args`, its output in "machine<N>".
  LauncherProcess* Start(const Args& args) {
    const std::string name = "machine" + std::to_string(launchers_.size());
    launchers_.push_back(
        std::make_unique<LauncherProcess>(args, OutputPath(name), Args{}, ProcessGroup::kOwn));
    return launchers_.back().get();
  }

  // The launcher whose worker is rank `rank` now, waiting for it up to `timeout`.
  LauncherProcess* LauncherOfRank(int rank, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& launcher : launchers_) {
        if (WorkerWithRank(launcher->pid(), rank) > 0) return launcher.get();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return nullptr;
  }

  // The launcher that holds the job's store (any of those started may win it), within 30 s.
  LauncherProcess* MachineZero() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& launcher : launchers_) {
        if (Contains(launcher->Output(), "this is machine 0 (")) return launcher.get();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return nullptr;
  }

  std::vector<std::unique_ptr<LauncherProcess>> launchers_;
};

}  // namespace dpl::test
