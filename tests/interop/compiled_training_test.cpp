// Modules written in Python, compiled by tools/compile_model.py, trained by the launcher with
// `--model compiled` at 2 ranks: the recipe's ConvNet and tools/gpt_model.py's GPT train as eager
// PyTorch does at the same global batch (the first 20 losses within 1e-4), their replicas stay
// bit-identical, and the exported state dict loads strictly into the Python class, whose logits
// are the package's; a GPT with dropout resumed from a checkpoint ends bit for bit where the
// straight run ends; torchvision's ResNet-18 (BatchNorm) trains at CIFAR-10's shapes; a bf16
// package trains under --precision bf16.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <utility>

#include "compiled_support.hpp"
#include "interop_support.hpp"

namespace dpl::compiled_test {
namespace {

using interop_test::Args;
using interop_test::Contains;
using interop_test::JobResult;
using interop_test::StepLosses;

std::vector<float> ReadFloats(const std::string& path) {
  const std::vector<char> bytes = interop_test::ReadBytes(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::vector<double> Numbers(const std::string& output, const std::string& key) {
  const size_t at = output.rfind(key + " ");
  std::vector<double> numbers;
  if (at == std::string::npos) return numbers;
  std::istringstream line(output.substr(at + key.size(), output.find('\n', at) - at));
  for (double number; line >> number;) numbers.push_back(number);
  return numbers;
}

class CompiledTraining : public interop_test::InteropTest {
 protected:
  void SetUp() override {
    if (!dpl::testing::PythonHasTorch()) {
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
    }
    char pattern[] = "/tmp/dpl-compiled-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    ASSERT_FALSE(CompiledFixtureDir().empty());
  }

  // `kind` (convnet or gpt) on its fixture data at 2 ranks, SGD at `lr`, global batch 32.
  static Args Training(const std::string& kind, const std::string& package) {
    Args args = {"--backend",    "gloo",     "--num-processes", "2",
                 "--model",      "compiled", "--model-options", "file=" + CompiledFixture(package),
                 "--batch-size", "32",       "--optimizer",     "sgd",
                 "--seed",       "3",        "--log-interval",  "1",
                 "--epochs",     "10"};
    if (kind == "convnet") {
      args.insert(args.end(),
                  {"--data", "idx", "--data-dir", CompiledFixture("mnist"), "--lr", "0.05"});
    } else {
      args.insert(args.end(), {"--data", "tokens", "--data-dir", CompiledFixture("tokens"),
                               "--data-options", "block=32,vocab=256", "--lr", "0.5"});
    }
    return args;
  }

  // 50 steps: the first 20 losses against eager PyTorch's, the replicas, the export's logits.
  void TrainsAsEagerPyTorch(const std::string& kind, const std::string& lr) {
    Args args = Training(kind, kind + ".pt2");
    args.insert(args.end(), {"--max-steps", "50", "--metrics", Path("m.jsonl"), "--dump-parameters",
                             Folder("dump"), "--export", Path("state.pt")});
    const JobResult job = Run(args, kind, std::chrono::seconds(300));
    ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
    const std::vector<double> losses = StepLosses(Path("m.jsonl"));
    ASSERT_EQ(losses.size(), 50u) << job.output;
    const std::vector<double> eager = Numbers(
        RunCompiledPython("eager " + kind + " " + CompiledFixtureDir() + " 20 32 2 3 " + lr),
        "losses");
    ASSERT_EQ(eager.size(), 20u);
    for (size_t step = 0; step < 20; ++step) {
      EXPECT_NEAR(losses[step], eager[step], 1e-4 * std::fabs(eager[step]))
          << kind << " step " << step;
    }
    EXPECT_LT(losses.back(), losses.front()) << kind << ": the loss must fall";
    std::cout << kind << ": loss " << losses.front() << " -> " << losses.back() << " (eager "
              << eager.front() << " -> " << eager.back() << " at step 20)\n";
    const std::vector<float> rank0 = ReadFloats(Path("dump/rank-0.bin"));
    ASSERT_FALSE(rank0.empty());
    EXPECT_TRUE(rank0 == ReadFloats(Path("dump/rank-1.bin"))) << "replicas differ";

    const std::string output =
        RunCompiledPython("logits " + kind + " " + CompiledFixture(kind + ".pt2") + " " +
                          Path("state.pt") + " " + CompiledFixtureDir());
    const std::vector<double> difference = Numbers(output, "largest_difference");
    const std::vector<double> scale = Numbers(output, "scale");
    ASSERT_FALSE(difference.empty() || scale.empty()) << output;
    EXPECT_LE(difference[0], 1e-5 * scale[0]) << output;
  }
};

TEST_F(CompiledTraining, RecipeConvNetTrainsAsEagerPyTorchWithIdenticalReplicas) {
  TrainsAsEagerPyTorch("convnet", "0.05");
}

TEST_F(CompiledTraining, GptTrainsAsEagerPyTorchWithIdenticalReplicas) {
  TrainsAsEagerPyTorch("gpt", "0.5");
}

// Dropout draws from libtorch's generator, which checkpoints carry: a run resumed from the
// checkpoint of step 10 ends bit for bit where the straight run of 20 steps ends.
TEST_F(CompiledTraining, GptWithDropoutResumedRepeatsTheStraightRunBitForBit) {
  Args straight = Training("gpt", "gpt_dropout.pt2");
  straight.insert(straight.end(),
                  {"--max-steps", "20", "--checkpoint-every", "10", "--checkpoint-dir",
                   Folder("checkpoints"), "--dump-parameters", Folder("straight")});
  const JobResult run = Run(straight, "straight", std::chrono::seconds(300));
  ASSERT_TRUE(run.ok()) << test::Describe(run.status) << "\n" << run.output;
  std::filesystem::copy_file(Path("checkpoints/checkpoint-0000000010.pt"),
                             Folder("from10") + "/checkpoint-0000000010.pt");
  Args resumed = Training("gpt", "gpt_dropout.pt2");
  resumed.insert(resumed.end(), {"--max-steps", "20", "--resume", "--checkpoint-dir",
                                 Path("from10"), "--dump-parameters", Folder("resumed")});
  const JobResult resume = Run(resumed, "resumed", std::chrono::seconds(300));
  ASSERT_TRUE(resume.ok()) << test::Describe(resume.status) << "\n" << resume.output;
  EXPECT_TRUE(Contains(resume.output, "resumed from ")) << resume.output;
  const std::vector<float> end = ReadFloats(Path("straight/rank-0.bin"));
  ASSERT_FALSE(end.empty());
  EXPECT_TRUE(end == ReadFloats(Path("resumed/rank-0.bin"))) << "the resumed run ends elsewhere";
  EXPECT_TRUE(end == ReadFloats(Path("resumed/rank-1.bin")));
}

// torchvision's ResNet-18 (BatchNorm, its running statistics updated by the compiled step) on
// CIFAR-10-shaped records of 10 learnable classes: the loss falls, the replicas stay identical,
// and evaluation with rank 0's running statistics classifies most of the test records.
TEST_F(CompiledTraining, TorchvisionResNet18TrainsAtCifarShapes) {
  Args args = {"--backend", "gloo", "--num-processes", "2", "--model", "compiled"};
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--model-options", "file=" + CompiledFixture("resnet18.pt2")},
           {"--data", "cifar10"},
           {"--data-dir", CompiledFixture("cifar")},
           {"--batch-size", "16"},
           {"--optimizer", "sgd"},
           {"--lr", "0.01"},
           {"--max-steps", "20"},
           {"--epochs", "10"},
           {"--log-interval", "1"},
           {"--seed", "1"},
           {"--metrics", Path("m.jsonl")},
           {"--dump-parameters", Folder("dump")}}) {
    args.insert(args.end(), {flag, value});
  }
  const JobResult job = Run(args, "resnet18", std::chrono::seconds(300));
  ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
  EXPECT_TRUE(Contains(job.output,
                       "model compiled 1.0.0: 62 parameter tensors, 11181642 "
                       "elements, on cpu, 60 buffers"))
      << job.output;
  const std::vector<double> losses = StepLosses(Path("m.jsonl"));
  ASSERT_EQ(losses.size(), 20u);
  const double first = (losses[0] + losses[1] + losses[2] + losses[3] + losses[4]) / 5;
  const double last = (losses[15] + losses[16] + losses[17] + losses[18] + losses[19]) / 5;
  EXPECT_LT(last, 0.5 * first) << "the loss must fall";
  EXPECT_TRUE(ReadFloats(Path("dump/rank-0.bin")) == ReadFloats(Path("dump/rank-1.bin")));
  const interop_test::PrintedAccuracy accuracy = interop_test::AccuracyIn(job.output);
  ASSERT_TRUE(accuracy.found) << job.output;
  EXPECT_EQ(accuracy.count, 40);
  EXPECT_GE(accuracy.correct, 30) << job.output;
  std::cout << "ResNet-18: loss " << first << " -> " << last << " (means of 5 steps), test "
            << accuracy.correct << "/" << accuracy.count << "\n";
}

// A bf16 package under --precision bf16: its losses follow fp32 eager PyTorch's loosely.
TEST_F(CompiledTraining, Bf16PackageTrainsUnderBf16) {
  Args args = Training("convnet", "convnet_bf16.pt2");
  args.insert(args.end(),
              {"--precision", "bf16", "--max-steps", "20", "--metrics", Path("m.jsonl")});
  const JobResult job = Run(args, "bf16", std::chrono::seconds(300));
  ASSERT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
  const std::vector<double> losses = StepLosses(Path("m.jsonl"));
  ASSERT_EQ(losses.size(), 20u);
  const std::vector<double> eager = Numbers(
      RunCompiledPython("eager convnet " + CompiledFixtureDir() + " 20 32 2 3 0.05"), "losses");
  ASSERT_EQ(eager.size(), 20u);
  for (size_t step = 0; step < 20; ++step) {
    EXPECT_NEAR(losses[step], eager[step], 0.05 * eager[step]) << "step " << step;
  }
}

}  // namespace
}  // namespace dpl::compiled_test
