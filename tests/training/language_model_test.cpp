// A language model through the launcher: the gpt plugin on byte-level English text (the `text`
// data plugin over Debian's fortunes), 2 ranks. The validation loss falls below a fixed bound,
// replicas stay bit-identical, a resumed run ends bit-identical to the straight one with the same
// validations; --init-from takes the Python class's state dict and the first step's loss is
// Python's; --export loads strictly into the Python class, whose loss and hits on the test text
// are the launcher's; --early-stop-patience ends a run cleanly, a resume of it trains nothing, and
// --export-best keeps the best model. Python's side: language_model_reference.py (Debian's
// dpl's Python; those checks skip without it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "launcher_runs.hpp"
#include "support/shell_capture.hpp"

namespace {

namespace fs = std::filesystem;
using dpl::test::Contains;
using dpl::test::ReadFloats;
using dpl::test::RunLauncher;
using dpl::test::RunResult;

// Byte-level English: one of the fortunes package's files (tools/setup.sh installs it).
const char* const kText = "/usr/share/games/fortunes/cookie";
// The tiny GPT of the tests: 2 layers, 4 heads, 64 dims; block 32 comes from the data.
const char* const kModel = "--model gpt --model-options layers=2,heads=4,dim=64";
// After 300 Adam steps of 16 windows the validation loss per byte is 2.79 (measured, falling
// from 3.34 at step 50); a model that learnt nothing stays near ln(256) = 5.55, and one that
// learnt only how often each byte comes reaches the bytes' unigram entropy, 3.25: below 2.9 it
// uses what came before.
constexpr double kValidationLossBound = 2.9;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The "validation" lines of a metrics file as "step loss best_loss" texts, in order.
std::vector<std::string> ValidationLines(const std::string& metrics) {
  std::ifstream in(metrics);
  const std::regex fields(
      R"("step": ([0-9]+), "loss": ([-0-9.e]+),.*"best_loss": ([-0-9.e]+|null))");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (line.rfind("{\"kind\": \"validation\"", 0) != 0) continue;
    if (std::regex_search(line, match, fields)) {
      lines.push_back(match.str(1) + " " + match.str(2) + " " + match.str(3));
    }
  }
  return lines;
}

// The number after `key` in the last line of kind `kind` of a metrics file; NaN when none.
double LastMetric(const std::string& metrics, const std::string& kind, const std::string& key) {
  std::ifstream in(metrics);
  const std::regex number("\"" + key + "\": ([-+0-9.eE]+)");
  double value = std::nan("");
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (line.rfind("{\"kind\": \"" + kind + "\"", 0) != 0) continue;
    if (std::regex_search(line, match, number)) value = std::stod(match[1]);
  }
  return value;
}

class LanguageModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kText))
      GTEST_SKIP() << kText << " is missing: install fortunes (tools/setup.sh)";
    char pattern[] = "/tmp/dpl-lm-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    // The text's first 90 % train, the rest validation and test, cut at a line's end.
    const std::string text = ReadFile(kText);
    const size_t cut = text.find('\n', text.size() * 9 / 10) + 1;
    fs::create_directories(dir_ + "/text");
    WriteFile(dir_ + "/text/train.txt", text.substr(0, cut));
    WriteFile(dir_ + "/text/val.txt", text.substr(cut));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string Folder(const std::string& name) const {
    fs::create_directories(Path(name));
    return Path(name);
  }
  // The tiny GPT (with `model_options` more) on the text of `folder` (train.txt, val.txt) cut
  // into windows of 32 bytes, 2 ranks.
  std::string Job(const std::string& folder = "text", const std::string& model_options = "") const {
    return std::string(kModel) + model_options +
           " --data text --data-options block=32 --data-dir " + Path(folder) +
           " --data-cache none --num-processes 2 --seed 5 ";
  }
  static std::string Reference(const std::string& arguments) {
    return dpl::testing::RunPythonScript(
        std::string(DPL_TEST_SOURCE_DIR) + "/tests/training/language_model_reference.py",
        arguments);
  }

  std::string dir_;
};

TEST_F(LanguageModelTest, ValidationLossFallsReplicasAgreeAndAResumeEndsAsTheStraightRun) {
  const std::string straight = Folder("straight"), checkpoints = Folder("checkpoints");
  const std::string options = Job() +
                              "--batch-size 16 --optimizer adam --lr 0.002 --max-steps 300 "
                              "--eval-every 50 --eval-batches 4 --log-interval 50 ";
  const RunResult run =
      RunLauncher(options + "--checkpoint-every 150 --checkpoint-dir " + checkpoints +
                  " --metrics " + Path("straight.jsonl") + " --dump-parameters " + straight);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> validations = ValidationLines(Path("straight.jsonl"));
  ASSERT_EQ(validations.size(), 6u) << run.output;
  const double last = LastMetric(Path("straight.jsonl"), "validation", "loss");
  std::cout << "validation (step loss best): ";
  for (const std::string& line : validations) std::cout << "[" << line << "] ";
  std::cout << "\n";
  EXPECT_LT(last, kValidationLossBound);
  EXPECT_TRUE(Contains(run.output, "validation at step 300: loss per token: ")) << run.output;
  EXPECT_TRUE(Contains(run.output, "test set: loss per token: ")) << run.output;
  const std::vector<float> rank0 = ReadFloats(straight + "/rank-0.bin");
  ASSERT_EQ(rank0.size(), 118528u);
  EXPECT_TRUE(rank0 == ReadFloats(straight + "/rank-1.bin")) << "replicas differ";

  // The checkpoint of step 150 alone, resumed to step 300.
  const std::string resumed = Folder("resumed"), from150 = Folder("from150");
  fs::copy_file(checkpoints + "/checkpoint-0000000150.pt", from150 + "/checkpoint-0000000150.pt");
  const RunResult resume =
      RunLauncher(options + "--resume --checkpoint-dir " + from150 + " --metrics " +
                  Path("resumed.jsonl") + " --dump-parameters " + resumed);
  ASSERT_EQ(resume.exit_code, 0) << resume.output;
  EXPECT_TRUE(Contains(resume.output, "resumed from ")) << resume.output;
  EXPECT_TRUE(rank0 == ReadFloats(resumed + "/rank-0.bin")) << "the resumed run ends elsewhere";
  EXPECT_TRUE(rank0 == ReadFloats(resumed + "/rank-1.bin"));
  // Its validations are the straight run's after step 150, best loss included.
  const std::vector<std::string> later(validations.begin() + 3, validations.end());
  EXPECT_EQ(ValidationLines(Path("resumed.jsonl")), later);
}

// --init-from a state dict of tools/gpt_model.py's GPT: the first step's loss is Python's on the
// same window (a training text of one window: every rank's batch is that window); --export after
// the step loads strictly into the Python class, whose loss and hits on the test text are the
// launcher's evaluation.
TEST_F(LanguageModelTest, InitFromPythonGivesItsLossAndTheExportGivesTheLaunchersEvaluation) {
  if (!dpl::testing::PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const std::string text = ReadFile(Path("text/train.txt"));
  fs::create_directories(Path("one"));
  WriteFile(Path("one/train.txt"), text.substr(0, 33));  // one window of 32 + 1 bytes
  WriteFile(Path("one/val.txt"), ReadFile(Path("text/val.txt")).substr(0, 4000));
  Reference("state " + Path("python.pt") + " 7");
  const RunResult run =
      RunLauncher(Job("one") + "--batch-size 2 --optimizer adam --lr 0.001 --max-steps 1 " +
                  "--log-interval 1 --init-from " + Path("python.pt") + " --export " +
                  Path("export.pt") + " --metrics " + Path("m.jsonl"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string python_first =
      Reference("loss " + Path("python.pt") + " " + Path("one/train.txt") + " 4");
  std::smatch match;
  const std::string line = python_first.substr(python_first.rfind("loss "));
  ASSERT_TRUE(std::regex_search(line, match, std::regex(R"(loss ([-0-9.e]+) correct)")));
  const double launcher_first = dpl::test::StepMetric(Path("m.jsonl"), "loss").at(0);
  EXPECT_NEAR(launcher_first, std::stod(match[1]), 1e-5) << python_first;

  const std::string python_export =
      Reference("loss " + Path("export.pt") + " " + Path("one/val.txt") + " 4");
  const std::string result = python_export.substr(python_export.rfind("loss "));
  ASSERT_TRUE(std::regex_search(result, match,
                                std::regex(R"(loss ([-0-9.e]+) correct ([0-9]+) count ([0-9]+))")));
  EXPECT_NEAR(LastMetric(Path("m.jsonl"), "eval", "loss"), std::stod(match[1]), 1e-5) << result;
  EXPECT_EQ(LastMetric(Path("m.jsonl"), "eval", "correct"), std::stod(match[2])) << result;
  EXPECT_EQ(LastMetric(Path("m.jsonl"), "eval", "tokens"), std::stod(match[3])) << result;
  std::cout << "first step " << launcher_first << ", Python " << match.str(1) << "\n";
}

// With a learning rate that moves no float32 parameter (and no biases, which would move away from
// zero), the validation loss never improves on the first evaluation's: --early-stop-patience 2 ends
// the run after the third evaluation with a checkpoint, the test set and the export, and a resume
// from that checkpoint trains nothing.
TEST_F(LanguageModelTest, EarlyStopEndsTheRunCleanlyAndExportBestKeepsTheBest) {
  const std::string checkpoints = Folder("stop_checkpoints");
  const std::string options = Job("text", ",bias=0") +
                              "--batch-size 8 --optimizer sgd --lr 1e-30 --max-steps 100 "
                              "--eval-every 5 --eval-batches 2 --early-stop-patience 2 "
                              "--checkpoint-dir " +
                              checkpoints + " --export-best " + Path("best.pt") + " --export " +
                              Path("last.pt") + " ";
  const RunResult run = RunLauncher(options + "--metrics " + Path("stop.jsonl"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output,
                       "early stop after step 15: the validation loss has not improved for 2 "
                       "evaluations (--early-stop-patience)"))
      << run.output;
  const std::vector<std::string> validations = ValidationLines(Path("stop.jsonl"));
  ASSERT_EQ(validations.size(), 3u) << run.output;
  EXPECT_TRUE(fs::exists(checkpoints + "/checkpoint-0000000015.pt"));
  EXPECT_TRUE(Contains(run.output, "training done: 15 steps")) << run.output;
  EXPECT_TRUE(Contains(run.output, "test set: loss per token: ")) << run.output;
  ASSERT_TRUE(fs::exists(Path("best.pt")));
  EXPECT_EQ(ReadFile(Path("best.pt")), ReadFile(Path("last.pt")))
      << "no parameter moved: the best model of step 5 is the last one";

  const RunResult again = RunLauncher(options + "--resume --metrics " + Path("again.jsonl"));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(Contains(again.output,
                       "training done: nothing was left to train (the run resumed at step 15, its "
                       "end)"))
      << again.output;
  EXPECT_TRUE(ValidationLines(Path("again.jsonl")).empty()) << "the resumed run trained";
}

// A falling validation loss: --export-best holds the model of the last evaluation, the best.
TEST_F(LanguageModelTest, ExportBestHoldsTheModelOfTheLowestValidationLoss) {
  const RunResult run = RunLauncher(Job() +
                                    "--batch-size 16 --optimizer adam --lr 0.002 --max-steps 20 "
                                    "--eval-every 10 --eval-batches 2 --export-best " +
                                    Path("best.pt") + " --export " + Path("last.pt") +
                                    " --metrics " + Path("best.jsonl"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<std::string> validations = ValidationLines(Path("best.jsonl"));
  ASSERT_EQ(validations.size(), 2u);
  std::istringstream first(validations[0]), second(validations[1]);
  double step1, loss1, step2, loss2;
  first >> step1 >> loss1;
  second >> step2 >> loss2;
  ASSERT_LT(loss2, loss1) << "the loss must fall for this check";
  EXPECT_EQ(ReadFile(Path("best.pt")), ReadFile(Path("last.pt")));
}

// tools/export_model.py's TorchScript GPT of the Python class trains through --model torchscript
// on `tokens` data (nanoGPT's uint16 train.bin / val.bin of the text's bytes): the loss over every
// position falls.
TEST_F(LanguageModelTest, TorchScriptGptOfThePythonClassTrainsOnTokenData) {
  if (!dpl::testing::PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  fs::create_directories(Path("tokens"));
  for (const char* part : {"train", "val"}) {
    const std::string text = ReadFile(Path(std::string("text/") + part + ".txt"));
    std::string ids;
    for (const char byte : text) ids += {byte, '\0'};  // little-endian uint16
    WriteFile(Path(std::string("tokens/") + part + ".bin"), ids);
  }
  dpl::testing::RunPythonScript(
      std::string(DPL_TEST_SOURCE_DIR) + "/tools/export_model.py",
      Path("gpt.pt") + " --module " + DPL_TEST_SOURCE_DIR + "/tools/gpt_model.py:GPT --kwargs " +
          "'{\"vocab\": 256, \"block\": 32, \"layers\": 2, \"heads\": 4, \"dim\": 64}' " +
          "--input-shape 32 --token-ids 256");
  const RunResult run = RunLauncher(
      "--model torchscript --model-options file=" + Path("gpt.pt") +
      ",loss=cross_entropy --data tokens --data-options block=32,vocab=256 --data-dir " +
      Path("tokens") + " --data-cache none --num-processes 2 --seed 5 --batch-size 16 " +
      "--optimizer adam --lr 0.002 --max-steps 40 --log-interval 1 --metrics " +
      Path("script.jsonl"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<double> losses = dpl::test::StepMetric(Path("script.jsonl"), "loss");
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.2) << "nanoGPT's init predicts nearly uniformly";
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  EXPECT_TRUE(Contains(run.output, "test set: loss per token: ")) << run.output;
  std::cout << "torchscript gpt: loss " << losses.front() << " -> " << losses.back() << "\n";
}

// Note [The training set of a resumed run] (training/checkpoint_policy.cpp): the data's folder may
// change, but a resume on a training set of another size is refused, naming both sizes.
TEST_F(LanguageModelTest, AResumeOnATrainingSetOfAnotherSizeIsRefused) {
  const std::string text = ReadFile(Path("text/train.txt"));
  fs::create_directories(Path("half"));
  WriteFile(Path("half/train.txt"), text.substr(0, text.size() / 2));
  WriteFile(Path("half/val.txt"), ReadFile(Path("text/val.txt")));
  const std::string checkpoints = Folder("checkpoints");
  const std::string common = "--batch-size 16 --no-eval --checkpoint-dir " + checkpoints + " ";
  const RunResult run = RunLauncher(Job() + common + "--max-steps 2 --checkpoint-every 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const RunResult moved = RunLauncher(Job("half") + common + "--max-steps 4 --resume");
  EXPECT_NE(moved.exit_code, 0) << moved.output;
  EXPECT_TRUE(Contains(moved.output,
                       "checkpoint-0000000002.pt was written at epoch 0, batch 2 of a training set "
                       "of "))
      << moved.output;
  EXPECT_TRUE(Contains(moved.output, " samples, but this run's training set has ")) << moved.output;
  const RunResult same = RunLauncher(Job() + common + "--max-steps 4 --resume");
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

// A newest checkpoint that cannot be read (a copy cut short) is refused, saying how to go on from
// the one before it, which then resumes.
TEST_F(LanguageModelTest, AnUnreadableNewestCheckpointNamesTheOneBefore) {
  const std::string checkpoints = Folder("checkpoints");
  const std::string common = "--batch-size 16 --no-eval --checkpoint-dir " + checkpoints + " ";
  const RunResult run = RunLauncher(Job() + common + "--max-steps 4 --checkpoint-every 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string newest = checkpoints + "/checkpoint-0000000004.pt";
  fs::resize_file(newest, fs::file_size(newest) / 2);
  const RunResult refused = RunLauncher(Job() + common + "--max-steps 6 --resume");
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_TRUE(Contains(refused.output, "; to resume from the one before it, " + checkpoints +
                                           "/checkpoint-0000000002.pt (step 2), move " + newest +
                                           " out of " + checkpoints))
      << refused.output;
  fs::rename(newest, Path("unreadable.pt"));
  const RunResult resumed = RunLauncher(Job() + common + "--max-steps 6 --resume");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(Contains(resumed.output, "resumed from " + checkpoints + "/checkpoint-0000000002.pt"))
      << resumed.output;
}
}  // namespace
