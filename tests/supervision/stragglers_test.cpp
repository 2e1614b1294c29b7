// Note [Stragglers] (launcher/training/stragglers.hpp): two launchers on loopback, two workers
// each, the test model's steps 10 ms on every rank; from its 20th step rank 1 (machine 0) sleeps
// 250 ms more. Rank 0 must name rank 1 and its machine within 10 steps, in the log, the metrics
// and the TensorBoard file; a run without the sleep names no rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

constexpr int kSlowFrom = 20;

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Every file of `folder` (TensorBoard's events), back to back.
std::string ReadFolder(const std::string& folder) {
  std::string all;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ignored)) {
    all += ReadFile(entry.path().string());
  }
  return all;
}

class StragglersTest : public TrainingJobTest {
 protected:
  // Runs the job on two machines of two workers; machine 0's output.
  std::string RunTwoMachines(const std::string& model_options) {
    const std::string port = std::to_string(FreePort());
    std::vector<std::unique_ptr<LauncherProcess>> machines;
    for (int machine = 0; machine < 2; ++machine) {
      Args args = Job("gloo", "faulty", 2,
                      {"--num-machines", "2", "--machine-id", std::to_string(machine),
                       "--master-addr", "127.0.0.1", "--master-port", port, "--max-steps", "36",
                       "--log-interval", "100", "--metrics", dir_ + "/metrics.jsonl",
                       "--tensorboard", dir_ + "/board", "--model-options", model_options});
      args = WithValue(args, "--plugin-dir", LightPluginDir(machine));
      machines.push_back(
          std::make_unique<LauncherProcess>(args, OutputPath("machine" + std::to_string(machine))));
    }
    for (auto& machine : machines) {
      const auto status = machine->Wait(120s);
      EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << machine->Output();
    }
    return machines[0]->Output();
  }

  std::string LightPluginDir(int machine) {
    if (machine == 0) return TrainingJobTest::LightPluginDir();
    return dir_ + "/plugins";
  }
};

TEST_F(StragglersTest, ARankThatSleepsIsNamedWithItsMachineWithinTenSteps) {
  const std::string output =
      RunTwoMachines("step_ms=10,slow_rank=1,slow_ms=250,slow_step=" + std::to_string(kSlowFrom));
  const std::string named = "rank 1 on machine 0 (host " + HostName() + ") is a straggler: ";
  EXPECT_TRUE(Contains(output, named)) << output;
  for (const char* other : {"rank 0 on", "rank 2 on", "rank 3 on"}) {
    EXPECT_FALSE(Contains(output, other)) << output;
  }
  // The metrics' record: the step rank 0 was at when it named rank 1.
  const std::string metrics = ReadFile(dir_ + "/metrics.jsonl");
  const std::regex record(
      "\\{\"kind\": \"straggler\", \"step\": ([0-9]+), \"rank\": 1, \"machine\": 0, "
      "\"host\": \"[^\"]*\", \"straggling\": true, ");
  std::smatch found;
  ASSERT_TRUE(std::regex_search(metrics, found, record)) << metrics;
  const int step = std::stoi(found[1]);
  EXPECT_GT(step, kSlowFrom) << metrics;
  EXPECT_LE(step, kSlowFrom + 10) << metrics;
  EXPECT_EQ(Occurrences(metrics, "\"kind\": \"straggler\""), 1) << metrics;
  EXPECT_TRUE(Contains(ReadFolder(dir_ + "/board"), "stragglers/rank_1"));
}

TEST_F(StragglersTest, NoRankIsNamedWhenNoneSleeps) {
  const std::string output = RunTwoMachines("step_ms=10");
  EXPECT_FALSE(Contains(output, "straggler")) << output;
  EXPECT_FALSE(Contains(ReadFile(dir_ + "/metrics.jsonl"), "straggler"));
  EXPECT_TRUE(Contains(output, "training done: 36 steps")) << output;
}

}  // namespace
}  // namespace dpl::test
