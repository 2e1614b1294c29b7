// tools/plot_metrics.py on metrics files of every kind of line: the PNG it draws (read back with
// PIL) and its exact refusals.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

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

// dpl's Python, with matplotlib and PIL (tools/requirements.txt).
const char* kPython = DPL_TEST_PYTHON;

class PlotMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system((std::string(kPython) + " -c 'import matplotlib, PIL' 2>/dev/null").c_str()) !=
        0) {
      GTEST_SKIP() << "needs matplotlib and PIL, which " DPL_TEST_PYTHON
                      " cannot import (run tools/setup.sh)";
    }
    dir_ = std::string(DPL_TEST_BINARY_DIR) + "/plot-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  CommandRun Plot(const std::string& arguments) {
    return RunCommand(std::string(kPython) + " " + DPL_TEST_SOURCE_DIR + "/tools/plot_metrics.py " +
                      arguments);
  }
  std::string dir_;
};

constexpr const char* kRun =
    R"({"kind": "step", "epoch": 0, "step": 10, "batch": 10, "loss": 1.7, "lr": 0.5, )"
    R"("samples_per_s": 1100.5, "time_s": 1.2, "phase_ms": {"data": 0.1}})"
    "\n"
    R"({"kind": "step", "epoch": 0, "step": 20, "batch": 20, "loss": null, "lr": 0.5, )"
    R"("samples_per_s": 1800, "time_s": 1.9, "phase_ms": {"data": 0.1}})"
    "\n\n"
    R"({"epoch": 0, "step": 30, "loss": 0.76, "samples_per_s": 1900.0, "time_s": 2.5})"
    "\n"
    R"({"kind": "epoch", "epoch": 0, "step": 30, "loss": 0.76, "seconds": 2.5, "samples": 3840, )"
    R"("samples_per_s": 1540.9, "time_s": 2.5})"
    "\n"
    R"({"kind": "eval", "epoch": 0, "step": 30, "loss": 0.81, "accuracy": 0.6938, )"
    R"("correct": 6938, "count": 10000, "time_s": 4.9})"
    "\n"
    R"({"kind": "validation", "epoch": 0, "step": 20, "loss": 0.9, "accuracy": 0.65, )"
    R"("correct": 650, "count": 1000, "best_loss": 0.9, "time_s": 2.0})"
    "\n"
    R"({"kind": "straggler", "step": 27, "rank": 1, "machine": 0, "host": "node7", )"
    R"("straggling": true, "compute_ms": 260.3, "median_ms": 10.1, "time_s": 3.4})"
    "\n";

// Size of the PNG and whether the colours of the first two runs (matplotlib's C0 and C1) are in it.
std::string DescribePng(const std::string& path) {
  const std::string command =
      std::string(kPython) +
      " -c \"import sys; from PIL import Image; im = Image.open(sys.argv[1]).convert('RGB'); "
      "colours = {c for _, c in im.getcolors(1 << 22)}; "
      "print(im.size, (31, 119, 180) in colours, (255, 127, 14) in colours)\" " +
      path;
  return RunCommand(command).output;
}

TEST_F(PlotMetricsTest, DrawsLossAccuracyAndThroughputOfEveryKindOfLine) {
  const std::string metrics = Write("run.jsonl", kRun);
  const std::string png = dir_ + "/run.png";
  const CommandRun run = Plot(metrics + " --out " + png + " --title 'two workers'");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "wrote " + png + ": 3 step, 1 epoch and 2 evaluation line(s)\n");
  EXPECT_EQ(DescribePng(png), "(1200, 1080) True False\n");
}

TEST_F(PlotMetricsTest, SeveralRunsGetTheirOwnColours) {
  const std::string one = Write("one.jsonl", kRun), two = Write("two.jsonl", kRun);
  const std::string png = dir_ + "/both.png";
  const CommandRun run = Plot(one + " " + two + " --out " + png);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "wrote " + png + ": 6 step, 2 epoch and 4 evaluation line(s)\n");
  EXPECT_EQ(DescribePng(png), "(1200, 1080) True True\n");
}

// Epoch lines with "loss_batches" hold the epoch's mean loss, drawn across the epoch's steps: from
// the previous epoch line's step (the first epoch from step 0, or after --resume from its first
// logged step); a null mean is left out.
TEST_F(PlotMetricsTest, EpochMeansSpanTheirEpochs) {
  const std::string metrics =
      Write("means.jsonl",
            R"({"kind": "step", "epoch": 0, "step": 10, "batch": 10, "loss": 1.7, "lr": 0.5, )"
            R"("samples_per_s": 1100.5, "time_s": 1.2, "phase_ms": {"data": 0.1}})"
            "\n"
            R"({"kind": "epoch", "epoch": 0, "step": 30, "loss": 0.9, "loss_batches": 60, )"
            R"("seconds": 2.5, "samples": 3840, "samples_per_s": 1540.9, "time_s": 2.5})"
            "\n"
            R"({"kind": "epoch", "epoch": 1, "step": 60, "loss": 0.5, "loss_batches": 60, )"
            R"("seconds": 2.5, "samples": 3840, "samples_per_s": 1540.9, "time_s": 5.0})"
            "\n"
            R"({"kind": "epoch", "epoch": 2, "step": 90, "loss": null, "loss_batches": 60, )"
            R"("seconds": 2.5, "samples": 3840, "samples_per_s": 1540.9, "time_s": 7.5})"
            "\n");
  const std::string resumed =
      Write("resumed.jsonl",
            R"({"kind": "step", "epoch": 3, "step": 100, "batch": 10, "loss": 0.4, "lr": 0.5, )"
            R"("samples_per_s": 1100.5, "time_s": 1.2, "phase_ms": {"data": 0.1}})"
            "\n"
            R"({"kind": "epoch", "epoch": 3, "step": 120, "loss": 0.45, "loss_batches": 40, )"
            R"("seconds": 2.5, "samples": 3840, "samples_per_s": 1540.9, "time_s": 2.5})"
            "\n");
  const CommandRun spans = RunCommand(
      std::string(kPython) + " -c \"import sys; sys.path.insert(0, sys.argv[1]); import " +
      "plot_metrics as p; [print(p.epoch_spans(p.read_metrics(f))) for f in sys.argv[2:]]\" " +
      DPL_TEST_SOURCE_DIR + "/tools " + metrics + " " + resumed);
  EXPECT_EQ(spans.output, "[(0, 30, 0.9), (30, 60, 0.5), (60, 90, None)]\n[(100, 120, 0.45)]\n");
  const std::string png = dir_ + "/means.png";
  const CommandRun run = Plot(metrics + " --out " + png);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output, "wrote " + png + ": 1 step, 3 epoch and 0 evaluation line(s)\n");
}

TEST_F(PlotMetricsTest, RefusesWhatIsNotAMetricsFile) {
  const std::string broken =
      Write("broken.jsonl", std::string(kRun).substr(0, std::string(kRun).find('\n') + 1) +
                                R"({"kind": "eval", "step": 3, "loss": 0.5})" + "\n");
  CommandRun run = Plot(broken + " --out " + dir_ + "/x.png");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output, broken +
                            ":2: not a metrics line ('accuracy'): "
                            "{\"kind\": \"eval\", \"step\": 3, \"loss\": 0.5}\n");
  const std::string other = Write("other.jsonl", R"({"kind": "histogram", "step": 1})"
                                                 "\n");
  run = Plot(other);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output, other +
                            ":1: not a metrics line (unknown kind 'histogram'): "
                            "{\"kind\": \"histogram\", \"step\": 1}\n");
  const std::string empty = Write("empty.jsonl", "\n");
  run = Plot(empty);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output,
            empty + ": no metrics lines; was the run started with --metrics " + empty + "?\n");
  EXPECT_FALSE(fs::exists(dir_ + "/x.png"));
}

}  // namespace
