// The launcher end to end as a user sees a run: the progress bar on a pseudo-terminal (script),
// plain stamped lines without one, the metrics file, the TensorBoard events read back by Python,
// the merged trace of every rank, and the stall report naming a worker stopped by SIGSTOP.
// Trains the mlp model (the convnet for the trace) on a small synthetic data set.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "supervision/launcher_processes.hpp"
#include "support/idx_writer.hpp"

namespace dpl::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct CommandRun {
  int exit_code = -1;
  std::string output;
};

CommandRun RunCommand(const std::string& command) {
  CommandRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string Python() {
  return std::string(DPL_TEST_PYTHON);
}

bool Available(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

bool PluginsBuilt(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (!fs::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/" + name)) return false;
  }
  return true;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class LauncherObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PluginsBuilt({"libdpl_model_mlp.so", "libdpl_backend_tcp.so"})) {
      GTEST_SKIP() << "the mlp model and the tcp backend are not built";
    }
    prctl(PR_SET_CHILD_SUBREAPER, 1);  // so the workers of a killed launcher are ours to see
    char pattern[] = "/tmp/dpl-observability-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    // 1280 training images: 40 batches of 32 an epoch; raw files, no cache to fill.
    using namespace dpl::testing;
    WriteRaw(dir_ + "/train-images-idx3-ubyte", IdxImages(1280, 28, 28));
    WriteRaw(dir_ + "/train-labels-idx1-ubyte", IdxLabels(1280));
    WriteRaw(dir_ + "/t10k-images-idx3-ubyte", IdxImages(100, 28, 28));
    WriteRaw(dir_ + "/t10k-labels-idx1-ubyte", IdxLabels(100));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The launcher's command line for a run on the synthetic data (a batch of 32 unless given).
  std::string Launcher(const std::string& arguments) const {
    const bool batch_given = arguments.find("--batch-size") != std::string::npos;
    return std::string(DPL_TEST_LAUNCHER) + " --plugin-dir " + DPL_TEST_PLUGIN_DIR +
           " --data-dir " + dir_ + " --data-cache none --master-port 0 --threads-per-worker 1 " +
           (batch_given ? "" : "--batch-size 32 ") + "--backend tcp " + arguments;
  }
  std::vector<std::string> LauncherArguments(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {"--plugin-dir",
                                     DPL_TEST_PLUGIN_DIR,
                                     "--data-dir",
                                     dir_,
                                     "--data-cache",
                                     "none",
                                     "--master-port",
                                     "0",
                                     "--threads-per-worker",
                                     "1",
                                     "--batch-size",
                                     "32",
                                     "--backend",
                                     "tcp"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  // Under a pseudo-terminal: what `script` recorded of the terminal's output.
  CommandRun OnATerminal(const std::string& arguments) const {
    return RunCommand("script -qfec \"" + Launcher(arguments) + "\" /dev/null");
  }
  CommandRun Inspect(const std::string& what) const {
    return RunCommand(Python() + " " + DPL_TEST_INSPECT_RUN + " " + what);
  }

  std::string dir_;
};

// Every "[=====>    ] STEP/TOTAL steps" the terminal was shown, in order.
std::vector<std::pair<int, int>> BarsDrawn(const std::string& terminal) {
  std::vector<std::pair<int, int>> bars;
  const std::regex bar(R"(\r\x1b\[K\[[=> ]+\] (\d+)/(\d+) steps)");
  for (auto it = std::sregex_iterator(terminal.begin(), terminal.end(), bar);
       it != std::sregex_iterator(); ++it) {
    bars.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
  }
  return bars;
}

TEST_F(LauncherObservabilityTest, OnATerminalTheBarAppearsAndEndsAtTheRealTotal) {
  if (!Available("script --version")) GTEST_SKIP() << "no `script` (util-linux) to give a terminal";
  // 40 batches an epoch, but --max-steps 30 ends the run at 30.
  const CommandRun run = OnATerminal("--num-processes 2 --model mlp --max-steps 30 --no-eval");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::pair<int, int>> bars = BarsDrawn(run.output);
  ASSERT_GE(bars.size(), 2u) << run.output;
  for (const auto& [step, total] : bars) EXPECT_EQ(total, 30) << run.output;
  EXPECT_EQ(bars.front().first, 0);
  EXPECT_EQ(bars.back().first, 30);
  EXPECT_NE(run.output.find(" 30/30 steps 100% "), std::string::npos) << run.output;
  // The log lines count to the real total as well, and scroll above the bar.
  EXPECT_NE(run.output.find("[rank 0] epoch: 0 [30/30] training loss: "), std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("/40] training loss"), std::string::npos) << run.output;
}

TEST_F(LauncherObservabilityTest, NoProgressDrawsNothingOnATerminal) {
  if (!Available("script --version")) GTEST_SKIP() << "no `script` (util-linux) to give a terminal";
  const CommandRun run =
      OnATerminal("--num-processes 2 --model mlp --max-steps 5 --no-eval --no-progress");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find('\x1b'), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("training done: 5 steps"), std::string::npos) << run.output;
}

TEST_F(LauncherObservabilityTest, WithoutATerminalLinesArePlainAndEachHasATime) {
  for (const std::string format : {"iso", "elapsed"}) {
    const CommandRun run =
        RunCommand(Launcher("--num-processes 2 --model mlp --max-steps 30 --log-time " + format));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    for (const char c : run.output) {
      ASSERT_FALSE(static_cast<unsigned char>(c) < 0x20 && c != '\n')
          << "control character " << int(c) << " in:\n"
          << run.output;
    }
    const std::regex stamped(
        format == "iso"
            ? R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d \[(rank|launcher) \d+\] .+)"
            : R"( *\d+\.\d{3}s \[(rank|launcher) \d+\] .+)");
    const std::vector<std::string> lines = Lines(run.output);
    ASSERT_GT(lines.size(), 5u);
    for (const std::string& line : lines) {
      EXPECT_TRUE(std::regex_match(line, stamped)) << format << ": " << line;
    }
    EXPECT_NE(run.output.find("epoch: 0 [10/30] training loss: "), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("bucket(s) of at most 25 MiB"), std::string::npos) << run.output;
  }
}

// Note [Epoch loss]: the epoch's loss is the mean of every rank's batch losses of the epoch, in
// the log, the metrics and the TensorBoard events. Every sample is alike (one image, one label),
// so both ranks' batches are the same and rank 0's logged step losses are every rank's: their
// mean is the epoch's, and it differs from the last step's as training goes on.
TEST_F(LauncherObservabilityTest, TheEpochLossIsTheMeanOfItsStepLossesOverEveryRank) {
  using namespace dpl::testing;
  std::vector<uint8_t> images = IdxImages(1280, 28, 28), labels = IdxLabels(1280);
  std::fill(images.begin() + 16, images.end(), uint8_t(77));  // after the 16-byte header
  std::fill(labels.begin() + 8, labels.end(), uint8_t(3));    // after the 8-byte header
  WriteRaw(dir_ + "/train-images-idx3-ubyte", images);
  WriteRaw(dir_ + "/train-labels-idx1-ubyte", labels);
  const std::string metrics = dir_ + "/metrics.jsonl";
  const CommandRun run =
      RunCommand(Launcher("--num-processes 2 --model mlp --epochs 2 --no-eval "
                          "--log-interval 1 --log-time none --lr 0.05 "
                          "--metrics " +
                          metrics));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const CommandRun lines = Inspect("metrics " + metrics);
  ASSERT_EQ(lines.exit_code, 0) << lines.output;
  std::map<int, std::vector<double>> step_losses;  // by epoch
  std::map<int, double> epoch_loss;
  for (const std::string& line : Lines(lines.output)) {
    std::istringstream fields(line);
    std::string kind;
    int a = 0, b = 0, batch = 0, loss_batches = 0, samples = 0;
    double loss = 0;
    fields >> kind >> a >> b;
    if (kind == "step") {
      fields >> batch >> loss;
      step_losses[b].push_back(loss);  // b: the epoch
    } else if (kind == "epoch") {
      fields >> loss >> samples >> loss_batches;
      epoch_loss[a] = loss;
      EXPECT_EQ(loss_batches, 80) << line;  // 40 batches x 2 ranks
    }
  }
  ASSERT_EQ(epoch_loss.size(), 2u) << lines.output;
  for (const auto& [epoch, loss] : epoch_loss) {
    const std::vector<double>& steps = step_losses[epoch];
    ASSERT_EQ(steps.size(), 40u) << "epoch " << epoch;
    double sum = 0;
    for (double step : steps) sum += step;
    // The step lines have six decimals, each half a unit of the last off at most.
    EXPECT_NEAR(loss, sum / double(steps.size()), 1e-6) << "epoch " << epoch;
    const std::regex said("epoch " + std::to_string(epoch) +
                          R"( done in [0-9.]+ s, [0-9.]+ samples/s, mean loss ([0-9.]+) over 40 )"
                          R"(batches x 2 ranks\n)");
    std::smatch match;
    ASSERT_TRUE(std::regex_search(run.output, match, said)) << run.output;
    EXPECT_NEAR(std::stod(match[1]), loss, 1e-6);
  }
  EXPECT_GT(std::fabs(epoch_loss[0] - step_losses[0].back()), 1e-3)
      << "the first epoch's loss is its last step's";
}

// What inspect_run.py read from a metrics file of 30 steps at --lr 0.25: the kind of each line
// in order, the loss of each logged step, the evaluation's loss and accuracy; each line's numbers
// checked on the way.
struct MetricsSeen {
  std::vector<std::string> kinds;
  std::map<int, double> loss_at;
  double eval_loss = -1, eval_accuracy = -1;
};

MetricsSeen ReadMetrics(const std::string& output) {
  MetricsSeen seen;
  std::map<int, double>& loss_at = seen.loss_at;
  double& eval_loss = seen.eval_loss;
  double& eval_accuracy = seen.eval_accuracy;
  std::vector<std::string>& kinds = seen.kinds;
  for (const std::string& line : Lines(output)) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    kinds.push_back(kind);
    if (kind == "step") {
      int step = 0, epoch = 0, batch = 0;
      double loss = 0, lr = 0;
      fields >> step >> epoch >> batch >> loss >> lr;
      EXPECT_EQ(batch, step);
      EXPECT_EQ(lr, 0.25);
      loss_at[step] = loss;
    } else if (kind == "epoch") {
      int epoch = 0, step = 0;
      fields >> epoch >> step;
      EXPECT_EQ(step, 30);
    } else if (kind == "eval") {
      int step = 0, correct = 0, count = 0;
      fields >> step >> eval_loss >> eval_accuracy >> correct >> count;
      EXPECT_EQ(step, 30);
      EXPECT_EQ(count, 100);
      EXPECT_DOUBLE_EQ(eval_accuracy, correct / 100.0);
    }
  }
  return seen;
}

// read_events.py's scalars by tag and step, and (in `count`) how many it printed.
std::map<std::string, std::map<int, double>> Scalars(const std::string& output, size_t* count) {
  std::map<std::string, std::map<int, double>> scalars;
  for (const std::string& line : Lines(output)) {
    std::istringstream fields(line);
    std::string kind, tag;
    int step = 0;
    double value = 0;
    fields >> kind;
    if (kind != "scalar") continue;
    fields >> tag >> step >> value;
    scalars[tag][step] = value;
    ++*count;
  }
  return scalars;
}

// The metrics lines, and the same numbers in the TensorBoard file, read back by
// read_events.py with protobuf, which checks every record's two CRCs.
TEST_F(LauncherObservabilityTest, MetricsAndTensorBoardHoldEveryLoggedStepEpochAndEvaluation) {
  const std::string metrics = dir_ + "/metrics.jsonl", board = dir_ + "/tb";
  const CommandRun run =
      RunCommand(Launcher("--num-processes 2 --model mlp --max-steps 30 --metrics " + metrics +
                          " --tensorboard " + board + " --lr 0.25"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The end of the log says where both are.
  EXPECT_NE(run.output.find("the metrics are in " + metrics + "\n"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("TensorBoard's events are in " + board + "\n"), std::string::npos)
      << run.output;
  const CommandRun lines = Inspect("metrics " + metrics);
  ASSERT_EQ(lines.exit_code, 0) << lines.output;
  const MetricsSeen seen = ReadMetrics(lines.output);
  const std::map<int, double>& loss_at = seen.loss_at;
  const double eval_loss = seen.eval_loss, eval_accuracy = seen.eval_accuracy;
  const std::vector<std::string>& kinds = seen.kinds;
  EXPECT_EQ(kinds, (std::vector<std::string>{"step", "step", "step", "epoch", "eval"}))
      << lines.output;
  ASSERT_EQ(loss_at.size(), 3u);
  EXPECT_EQ(loss_at.begin()->first, 10);

  if (!Available(Python() + " -c 'import google.protobuf'")) {
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import google.protobuf (run tools/setup.sh)";
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(board)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].filename().string().rfind("events.out.tfevents.", 0), 0u);
  const CommandRun events = RunCommand(Python() + " " + DPL_TEST_EVENTS_READER + " '" +
                                       files[0].string() + "' '" + DPL_TEST_BINARY_DIR + "'");
  ASSERT_EQ(events.exit_code, 0) << events.output;
  size_t count = 0;
  std::map<std::string, std::map<int, double>> scalars = Scalars(events.output, &count);
  EXPECT_NE(events.output.find("records " + std::to_string(count + 1) + "\n"), std::string::npos)
      << events.output;
  ASSERT_EQ(scalars["train/loss"].size(), 3u) << events.output;
  for (const auto& [step, loss] : loss_at) {
    EXPECT_NEAR(scalars["train/loss"][step], loss, 1e-6) << "step " << step;
    EXPECT_FLOAT_EQ(float(scalars["train/lr"][step]), 0.25f);
  }
  EXPECT_EQ(scalars["train/phase_ms/forward_backward"].size(), 3u);
  EXPECT_EQ(scalars["train/epoch_loss"].count(30), 1u);
  EXPECT_NEAR(scalars["eval/accuracy"][30], eval_accuracy, 1e-6);
  EXPECT_NEAR(scalars["eval/loss"][30], eval_loss, 1e-5);
}

TEST_F(LauncherObservabilityTest, TheTraceHoldsEveryRankAndEachAllreduceInsideOrAfterBackward) {
  if (!PluginsBuilt({"libdpl_model_convnet.so"})) GTEST_SKIP() << "the convnet is not built";
  const std::string trace = dir_ + "/trace.json";
  // Buckets of 1 MiB: the convnet's gradients go in several, submitted while backward runs,
  // through the backend's allreduce (not the shared memory the workers of one machine use by
  // default).
  const CommandRun run =
      RunCommand(Launcher("--num-processes 3 --batch-size 48 --max-steps 6 --no-eval "
                          "--bucket-cap-mb 1 --local-reduce backend --trace " +
                          trace));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("trace of 3 rank(s) written to " + trace), std::string::npos)
      << run.output;
  const CommandRun checked = Inspect("trace " + trace + " 3");
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(checked.output, match,
                                std::regex(R"(ok ranks=3 steps=6 allreduces=(\d+) )"
                                           R"(submitted_in_backward=(\d+))")))
      << checked.output;
  const int allreduces = std::stoi(match[1]);
  EXPECT_EQ(allreduces % (3 * 6), 0) << "every rank, every step, the same buckets";
  EXPECT_GE(allreduces, 3 * 6 * 2) << "the 1 MiB cap makes at least two buckets";
  // Buckets are submitted from the gradient callbacks, which run inside backward.
  EXPECT_GE(std::stoi(match[2]), 3 * 6) << checked.output;

  // The check can fail: an allreduce moved before its step's backward is caught.
  const std::string moved = dir_ + "/moved.json";
  const CommandRun edited = RunCommand(
      Python() +
      " -c \"import json, sys; d = json.load(open(sys.argv[1])); "
      "e = d['traceEvents']; step = lambda x: x.get('args', {}).get('step'); "
      "a = next(x for x in e if x['name'].startswith('allreduce') and step(x) == 3); "
      "b = next(x for x in e if x['name'] == 'backward' and x['pid'] == a['pid'] and "
      "step(x) == 3); a['ts'] = b['ts'] - 1000; json.dump(d, open(sys.argv[2], 'w'))\" " +
      trace + " " + moved);
  ASSERT_EQ(edited.exit_code, 0) << edited.output;
  const CommandRun refused = Inspect("trace " + moved + " 3");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_TRUE(std::regex_search(refused.output,
                                std::regex(R"(^rank \d: allreduce bucket \d/\d of step 3 starts )"
                                           R"(at [0-9.]+, before its backward at [0-9.]+\n$)")))
      << refused.output;
}

// Two launchers as two machines: machine 0 collects both ranks' parts through the store into its
// file; machine 1 writes none. Both share this host's clock, so machine 1's measured offset is
// small.
TEST_F(LauncherObservabilityTest, MachineZeroMergesTheTraceOfEveryMachine) {
  const std::string trace0 = dir_ + "/trace0.json", trace1 = dir_ + "/trace1.json";
  const std::vector<std::string> job = {"--num-machines",
                                        "2",
                                        "--num-processes",
                                        "1",
                                        "--model",
                                        "mlp",
                                        "--max-steps",
                                        "5",
                                        "--no-eval",
                                        "--rendezvous-timeout",
                                        "30"};
  std::vector<std::string> first = job, second = job;
  first.insert(first.end(), {"--machine-id", "0", "--trace", trace0});
  LauncherProcess machine0(LauncherArguments(first), dir_ + "/m0.log");
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  std::vector<std::string> args1 = LauncherArguments(second);
  for (size_t i = 0; i + 1 < args1.size(); ++i) {
    if (args1[i] == "--master-port") args1[i + 1] = std::to_string(port);
  }
  args1.insert(args1.end(), {"--machine-id", "1", "--trace", trace1});
  LauncherProcess machine1(args1, dir_ + "/m1.log");
  const auto status0 = machine0.Wait(60s), status1 = machine1.Wait(60s);
  ASSERT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  ASSERT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_FALSE(fs::exists(trace1)) << machine1.Output();
  const CommandRun checked = Inspect("trace " + trace0 + " 2");
  ASSERT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_EQ(checked.output.rfind("ok ranks=2 steps=5 ", 0), 0u) << checked.output;
  std::ifstream file(trace0);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::smatch match;
  const std::regex machine1_name(
      R"re("rank 1 \(machine 1, local rank 0, pid \d+\)(, clock ([-+][0-9.]+) ms from machine 0's)?")re");
  ASSERT_TRUE(std::regex_search(text, match, machine1_name)) << text.substr(0, 2000);
  if (match[2].matched) {
    EXPECT_LT(std::abs(std::stod(match[2])), 100.0) << match[0];
  }
}

// Rank 1 stopped by SIGSTOP: rank 0 blocks in the sum of the gradients (in the machine's shared
// memory, the default for workers of one machine: in its own part of the bucket, or waiting for
// rank 1's part, as the moment of the stop falls) or, the optimizer being sharded by default
// there, at a barrier of its parts, posts it after --stall-warning, and the
// launcher names rank 1 as the one that never arrived; when --backend-timeout ends the job, the
// error says it again.
TEST_F(LauncherObservabilityTest, AStoppedWorkerIsNamedWithinTheWarningTime) {
  const std::string output = dir_ + "/launcher.log";
  LauncherProcess launcher(LauncherArguments({"--num-processes", "2", "--model", "mlp", "--epochs",
                                              "100000", "--no-eval", "--stall-warning", "1",
                                              "--backend-timeout", "8", "--log-interval", "1"}),
                           output);
  ASSERT_TRUE(WaitForWorkers(launcher.pid(), 2, 20s)) << launcher.Output();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (launcher.Output().find("epoch: 0 [2/40]") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << launcher.Output();
    std::this_thread::sleep_for(10ms);
  }
  const pid_t stopped = WorkerWithRank(launcher.pid(), 1);  // a child of this test's launcher
  ASSERT_GT(stopped, 0);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const auto stopped_at = std::chrono::steady_clock::now();

  const std::string named = "rank 1 never arrived (no blocked call reported";
  const std::regex warning(
      R"(\[launcher 0\] warning: stalled: rank 0 waits in step \d+, shared-memory )"
      R"((reduce of bucket 1 of 1 \(\d+ KiB\)|sums \(\d+ KiB\)|barrier), for [0-9.]+ s; )"
      R"(rank 1 never arrived)");
  while (!std::regex_search(launcher.Output(), warning)) {
    ASSERT_LT(std::chrono::steady_clock::now() - stopped_at, 6s)
        << "no stall warning within the 1 s warning time and polls:\n"
        << launcher.Output();
    std::this_thread::sleep_for(10ms);
  }
  const auto warned_after = std::chrono::steady_clock::now() - stopped_at;
  std::cout << "stall warning " << std::chrono::duration<double>(warned_after).count()
            << " s after SIGSTOP\n";
  EXPECT_GE(warned_after, 1s);

  const auto status = launcher.Wait(30s);
  ASSERT_TRUE(ExitedWith(status, 1)) << Describe(status) << launcher.Output();
  const std::string text = launcher.Output();
  const auto error = text.find("[launcher 0] error: job failed: rank 0 ");
  ASSERT_NE(error, std::string::npos) << text;
  const auto repeated = text.find("\n  stalled before it ended: rank 0 waits in step ", error);
  ASSERT_NE(repeated, std::string::npos) << text;
  EXPECT_NE(text.find(named, repeated), std::string::npos) << text;
  EXPECT_TRUE(WaitUntilGone({stopped}, 5s)) << "the stopped worker outlived its launcher";
}

}  // namespace
}  // namespace dpl::test
