// The compiled model plugin through the C ABI on packages of tools/compile_model.py: what it
// refuses at create, each naming the file and the problem (another torch, another device, an
// instruction set this CPU lacks, data of another shape, another precision, another format, a
// file that is no package), a batch of any size, and gradients accumulated as
// --grad-accum's micro-steps accumulate them; and tools/compile_model.py's refusals of modules
// torch.export cannot take, with the reason and the line.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "compiled_support.hpp"
#include "models/plugin_driver.hpp"

namespace dpl::compiled_test {
namespace {

using dpl_test::Batch;
using dpl_test::Config;
using dpl_test::CreateStatus;
using dpl_test::Model;
using dpl_test::Plugin;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The word after `key` on compiled.py's "exit N file F line L" line.
std::string Field(const std::string& text, const std::string& key) {
  const size_t at = text.find(" " + key + " ");
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size() + 2;
  return text.substr(begin, text.find_first_of(" \n", begin) - begin);
}

class CompiledPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dpl::testing::PythonHasTorch()) {
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
    }
  }
  // The create error of the package `name` for 28x28 images of 10 classes (fp32), or `config`.
  static std::string Refusal(const std::string& name, dpl_model_config_v4 config) {
    const std::string options = "file=" + CompiledFixture(name);
    config.options = options.c_str();
    std::string message;
    EXPECT_NE(CreateStatus(Plugin("compiled"), config, &message), DPL_OK) << name;
    return message;
  }
  static std::string Refusal(const std::string& name) { return Refusal(name, Config("")); }
};

TEST_F(CompiledPlugin, APackageOfAnotherTorchIsRefused) {
  const std::string message = Refusal("other_torch.pt2");
  EXPECT_TRUE(Contains(message, CompiledFixture("other_torch.pt2") +
                                    " was made with torch 2.14.1+cpu; this plugin runs libtorch "))
      << message;
}

TEST_F(CompiledPlugin, APackageForAnotherDeviceIsRefused) {
  const std::string message = Refusal("for_cuda.pt2");
  EXPECT_TRUE(Contains(message,
                       " was made for cuda; this job runs on cpu: make one with "
                       "tools/compile_model.py --device cpu"))
      << message;
}

TEST_F(CompiledPlugin, APackageForInstructionsThisCpuLacksIsRefused) {
  const std::string message = Refusal("lacking_isa.pt2");
  EXPECT_TRUE(Contains(message,
                       ", and this CPU lacks amx_fp16, avx10_2: make it on this machine, "
                       "or with a lower tools/compile_model.py --cpu-isa"))
      << message;
}

TEST_F(CompiledPlugin, DataOfAnotherShapeIsRefusedNamingBothShapes) {
  const std::string message =
      Refusal("convnet.pt2", dpl_test::WithData(Config(""), {3, 32, 32}, 10));
  EXPECT_TRUE(Contains(message,
                       "the data has float32 (3, 32, 32) samples with int64 () targets of "
                       "10 classes; package "))
      << message;
  EXPECT_TRUE(Contains(message,
                       "was made for float32 (1, 28, 28) samples with () targets of 10 "
                       "classes"))
      << message;
  const std::string tokens = Refusal("gpt.pt2", dpl_test::WithTokens(Config(""), 64, 256));
  EXPECT_TRUE(Contains(tokens,
                       "the data has int64 (64) samples with int64 (64) targets of 256 "
                       "classes; package "))
      << tokens;
  EXPECT_TRUE(Contains(tokens, "was made for integer (32) samples with (32) targets")) << tokens;
}

TEST_F(CompiledPlugin, APrecisionOtherThanThePackagesIsRefused) {
  const std::string bf16 =
      Refusal("convnet.pt2", dpl_test::WithPrecision(Config(""), DPL_PRECISION_BF16));
  EXPECT_TRUE(Contains(bf16,
                       " computes in fp32; this job runs --precision bf16: run it with "
                       "--precision fp32, or make a package with tools/compile_model.py "
                       "--precision bf16"))
      << bf16;
  const std::string fp32 = Refusal("convnet_bf16.pt2");
  EXPECT_TRUE(Contains(fp32, " computes in bf16; this job runs --precision fp32")) << fp32;
}

TEST_F(CompiledPlugin, AnotherFormatOrAFileThatIsNoPackageIsRefused) {
  const std::string format = Refusal("other_format.pt2");
  EXPECT_TRUE(Contains(format, " is of format 99; this plugin reads format 1")) << format;
  const std::string not_zip = Refusal("mnist/train-labels-idx1-ubyte");
  EXPECT_TRUE(Contains(not_zip, "package " + CompiledFixture("mnist/train-labels-idx1-ubyte")))
      << not_zip;
  std::string message;
  dpl_model_config_v4 config = Config("");
  EXPECT_NE(CreateStatus(Plugin("compiled"), config, &message), DPL_OK);
  EXPECT_TRUE(Contains(message, "option \"file\" is missing")) << message;
  // One byte of a compiled program flipped: refused at create, not loaded to train wrong.
  const std::string damaged = Refusal("damaged.pt2");
  EXPECT_TRUE(Contains(damaged, "package " + CompiledFixture("damaged.pt2") + ": record "))
      << damaged;
  EXPECT_TRUE(Contains(damaged,
                       " fails its CRC-32 check: the file is corrupt; write it again or "
                       "use a good copy (make it again with tools/compile_model.py "
                       "--no-cache)"))
      << damaged;
}

// One package, batches of 1, 5 and 16 samples; the gradients of two micro-steps after one
// zero_gradients are the sum of each alone (--grad-accum), within float32's rounding.
TEST_F(CompiledPlugin, AnyBatchSizeTrainsAndMicroStepsAccumulate) {
  const std::string options = "file=" + CompiledFixture("convnet.pt2");
  Model model(Plugin("compiled"), Config(options.c_str()));
  const Batch first(5, 1), second(16, 2), single(1, 3);
  EXPECT_TRUE(std::isfinite(dpl_test::TrainStep(model, single)));
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  dpl_test::TrainStep(model, first);
  const std::vector<float> alone_first = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  dpl_test::TrainStep(model, second);
  const std::vector<float> alone_second = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  dpl_test::TrainStep(model, first);
  dpl_test::TrainStep(model, second);
  const std::vector<float> together = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(together.size(), alone_first.size());
  float largest = 0.0f, worst = 0.0f;
  for (size_t i = 0; i < together.size(); ++i) {
    largest = std::max(largest, std::fabs(together[i]));
    worst = std::max(worst, std::fabs(together[i] - (alone_first[i] + alone_second[i])));
  }
  EXPECT_GT(largest, 0.0f);
  EXPECT_LE(worst, 1e-6f * largest);
  const dpl_test::Evaluation evaluation = dpl_test::EvalStep(model, second);
  EXPECT_EQ(evaluation.elements, 16);
  EXPECT_TRUE(std::isfinite(evaluation.loss_sum));
}

// A batch of one sample through BatchNorm1d: PyTorch refuses it in training, and so does the
// compiled step instead of writing NaN into running_var; two samples train.
TEST_F(CompiledPlugin, ABatchOfOneThroughBatchNorm1dIsRefusedAsPyTorchRefusesIt) {
  const std::string package = CompiledFixture("batchnorm1d.pt2");
  const std::string options = "file=" + package;
  Model model(Plugin("compiled"), Config(options.c_str()));
  const Batch pair(2, 1), single(1, 2);
  EXPECT_TRUE(std::isfinite(dpl_test::TrainStep(model, pair)));
  float loss = NAN;
  EXPECT_EQ(model.plugin().train_step(model.get(), &single.input, &single.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.plugin().last_error()),
            "model \"compiled\": package " + package +
                ": a training batch of one sample made its buffer bn.running_var not finite "
                "(BatchNorm needs more than one value per channel in training, as PyTorch says); "
                "choose a --batch-size that leaves no rank a batch of one sample, or --drop-last");
}

// tools/compile_model.py on modules torch.export cannot take: the reason, and the file and line.
TEST_F(CompiledPlugin, TheToolRefusesWhatTorchExportCannotTakeNamingTheLine) {
  char pattern[] = "/tmp/dpl-compiled-refused-XXXXXX";
  const std::string scratch = ::mkdtemp(pattern);
  struct Case {
    const char* name;
    const char* reason;
  };
  for (const Case& refused : {Case{"data_dependent",
                                   "GuardOnDataDependentSymNode: Could not "
                                   "guard on data-dependent expression"},
                              Case{"numpy", "RuntimeError: .numpy() is not supported"}}) {
    const std::string output =
        RunCompiledPython(std::string("refuse ") + refused.name + " " + scratch);
    const std::string file = Field(output, "file"), line = Field(output, "line");
    EXPECT_TRUE(Contains(output, "exit 1 ")) << output;
    EXPECT_TRUE(Contains(output, "compile_model.py: torch.export cannot take ")) << output;
    EXPECT_TRUE(Contains(output, refused.reason)) << output;
    EXPECT_TRUE(Contains(output, "  at " + file + ":" + line + ": ")) << output;
  }
  int ignored = 0;
  dpl::testing::Capture("rm -rf '" + scratch + "'", &ignored);
}

}  // namespace
}  // namespace dpl::compiled_test
