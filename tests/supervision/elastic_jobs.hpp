// The launchers of one elastic job on loopback, each in a process group of its own, for the tests
// that kill machines in the middle of a job (lost_machines_test.cpp, elastic_samples_test.cpp).
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "training_jobs.hpp"

namespace dpl::test {

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
