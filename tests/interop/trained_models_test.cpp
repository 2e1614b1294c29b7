// Models trained by the launcher on Fashion-MNIST and read back by Python torch: the recipe's
// ConvNet scripted from Python (torch.jit.load of --export), dpl's own C++ ConvNet (its --export
// state dict into the recipe's Python class), and a Python-defined CNN with BatchNorm and a
// residual connection that is not in this tree.
#include <iostream>
#include <numeric>

#include "interop_support.hpp"

namespace dpl::interop_test {
namespace {

struct PythonEvaluation {
  long correct = -1;
  long count = -1;
  double loss_sum = 0.0;
  std::string training;
};

// interop.py's evaluation of `file` (kind script: torch.jit.load; state: torch.load into the
// recipe's ConvNet) on Fashion-MNIST's t10k set, in dpl's chunks of `world` ranks.
PythonEvaluation EvaluateInPython(const std::string& kind, const std::string& file, int world) {
  const std::string output = RunPython("evaluate " + kind + " " + file + " " + kFashionMnist + " " +
                                       std::to_string(world));
  PythonEvaluation evaluation;
  if (Field(output, "correct").empty()) {
    ADD_FAILURE() << "no evaluation from interop.py:\n" << output;
    return evaluation;
  }
  evaluation.correct = std::stol(Field(output, "correct"));
  evaluation.count = std::stol(Field(output, "count"));
  evaluation.loss_sum = std::stod(Field(output, "loss_sum"));
  evaluation.training = Field(output, "training");
  return evaluation;
}

// What dpl printed and what Python computes from the export agree to the last test sample, and
// the average loss to the 4 digits printed.
void ExpectSameEvaluation(const PrintedAccuracy& printed, const PythonEvaluation& python) {
  EXPECT_EQ(python.count, 10000);
  EXPECT_EQ(printed.count, python.count);
  EXPECT_EQ(printed.correct, python.correct)
      << "dpl printed " << printed.correct << "/" << printed.count << ", Python counts "
      << python.correct << "/" << python.count;
  EXPECT_NEAR(printed.average_loss, python.loss_sum / double(python.count), 0.5e-4 + 1e-6);
}

class TrainedModels : public InteropTest {};

TEST_F(TrainedModels, ScriptedRecipeConvNetExportedAfterOneEpochEvaluatesTheSameInPython) {
  const std::string exported = Path("convnet_trained.pt");
  const JobResult job = Run({"--backend", "gloo", "--num-processes", "2", "--model", "torchscript",
                             "--model-options", "file=" + Fixture("convnet.pt"), "--epochs", "1",
                             "--batch-size", "128", "--log-interval", "100", "--export", exported},
                            "train");
  ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
  EXPECT_TRUE(Contains(job.output, "the trained model is in " + exported)) << job.output;
  const PrintedAccuracy printed = AccuracyIn(job.output);
  ASSERT_TRUE(printed.found) << job.output;
  std::cout << "scripted ConvNet, 1 epoch at 2x1 (gloo): " << printed.correct << "/"
            << printed.count << "\n";
  EXPECT_GE(printed.correct, 8500) << job.output;

  const PythonEvaluation python = EvaluateInPython("script", exported, 2);
  EXPECT_EQ(python.training, "0") << "torch.jit.load must give the module in eval mode";
  ExpectSameEvaluation(printed, python);
}

TEST_F(TrainedModels, CppConvNetExportLoadsIntoThePythonClassWithTheSameAccuracy) {
  const std::string exported = Path("convnet_state.pt");
  const JobResult job = Run({"--backend", "gloo", "--num-processes", "2", "--model", "convnet",
                             "--epochs", "1", "--log-interval", "100", "--export", exported},
                            "train");
  ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
  const PrintedAccuracy printed = AccuracyIn(job.output);
  ASSERT_TRUE(printed.found) << job.output;
  EXPECT_GE(printed.correct, 8500) << job.output;
  // ConvNet().load_state_dict(torch.load(FILE)) is strict: exactly the module's names and shapes.
  ExpectSameEvaluation(printed, EvaluateInPython("state", exported, 2));
}

// Written by the test as residual_bn_cnn.py, exported with tools/export_model.py FILE.py:CLASS.
TEST_F(TrainedModels, PythonDefinedResidualBatchNormCnnTrainsToAFallingLossOnTwoRanks) {
  const std::string metrics = Path("metrics.jsonl"), exported = Path("residual_trained.pt");
  const JobResult job =
      Run({"--backend", "gloo", "--num-processes", "2", "--model", "torchscript", "--model-options",
           "file=" + Fixture("residual_bn_cnn.pt"), "--batch-size", "64", "--max-steps", "300",
           "--log-interval", "10", "--metrics", metrics, "--export", exported},
          "train");
  ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
  EXPECT_TRUE(Contains(job.output,
                       "model torchscript 1.0.0: 12 parameter tensors, 2914 elements, "
                       "on cpu, 9 buffers"))
      << job.output;
  const std::vector<double> losses = StepLosses(metrics);
  ASSERT_EQ(losses.size(), 30u);
  const double first = std::accumulate(losses.begin(), losses.begin() + 5, 0.0) / 5;
  const double last = std::accumulate(losses.end() - 5, losses.end(), 0.0) / 5;
  EXPECT_LT(last, 0.75 * first) << "mean loss of the first 5 logged steps " << first
                                << ", of the last 5 " << last;
  // Every rank evaluates with rank 0's running statistics, the ones exported.
  const PrintedAccuracy printed = AccuracyIn(job.output);
  ASSERT_TRUE(printed.found) << job.output;
  EXPECT_GE(printed.correct, 4000) << job.output;
  ExpectSameEvaluation(printed, EvaluateInPython("script", exported, 2));
}

}  // namespace
}  // namespace dpl::interop_test
