// The C++ gpt network against tools/gpt_model.py's GPT (dpl's Python (torch, numpy, ...); skipped
// without): the same logits and loss from the same state dict both ways, the same initial weights
// and dropout from the same seeds, TorchScript exports, and tools/generate.py on exports.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "gpt_network.hpp"
#include "gpt_test_support.hpp"

namespace dpl::gpt_test {
namespace {

using gpt::Gpt;
using gpt::GptConfig;

constexpr double kTolerance = 1e-5;  // logits and loss, C++ against Python

class GptPythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dpl::testing::PythonHasTorch())
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  }
};

torch::Tensor EvalLogits(Gpt& network, const torch::Tensor& ids) {
  network.eval();
  torch::NoGradGuard no_grad;
  return network.forward(ids);
}

TEST_F(GptPythonTest, GivesPythonsLogitsAndLossFromItsStateDict) {
  const auto batch = ReadTensors(Fixture("batch.pt"));
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias on" : "bias off");
    const std::string suffix = bias ? "1.pt" : "0.pt";
    const auto expected = ReadTensors(Fixture("expected_bias" + suffix));
    Gpt network(TinyConfig(bias));
    network.LoadStateDict(ReadTensorList(Fixture("state_bias" + suffix)), "state_bias" + suffix);
    const torch::Tensor logits = EvalLogits(network, batch.at("idx"));
    const double logit_difference = MaxDifference(logits, expected.at("logits"));
    const double loss = gpt::GptLoss(logits, batch.at("targets")).item<double>();
    const double python_loss = expected.at("loss").item<double>();
    EXPECT_LE(logit_difference, kTolerance);
    EXPECT_NEAR(loss, python_loss, kTolerance);
    // The comparison can fail: the logits span far more than the tolerance.
    EXPECT_GT(expected.at("logits").std().item<double>(), 0.1);
    std::cout << "bias " << bias << ": largest logit difference " << logit_difference << ", loss "
              << loss << " (Python " << python_loss << ")\n";
  }
}

TEST_F(GptPythonTest, DrawsPythonsInitialWeightsFromTheSameSeed) {
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias on" : "bias off");
    const auto python = ReadTensors(Fixture(bias ? "seed7_bias1.pt" : "seed7_bias0.pt"));
    torch::manual_seed(7);
    const Gpt network(TinyConfig(bias));
    const gpt::NamedTensors state = network.StateDict();
    ASSERT_EQ(state.size(), python.size());
    for (const auto& [name, tensor] : state) {
      EXPECT_TRUE(torch::equal(tensor, python.at(name))) << name;
    }
  }
}

TEST_F(GptPythonTest, DropsOutWherePythonDoes) {
  GptConfig config = TinyConfig();
  config.dropout = 0.25;
  torch::manual_seed(5);
  Gpt network(config);
  network.train();
  torch::manual_seed(9);
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = network.forward(ReadTensors(Fixture("batch.pt")).at("idx"));
  EXPECT_LE(MaxDifference(logits, ReadTensors(Fixture("dropout_seed5_9.pt")).at("logits")),
            kTolerance);
  torch::manual_seed(10);  // other masks, other logits
  EXPECT_GT(MaxDifference(network.forward(ReadTensors(Fixture("batch.pt")).at("idx")), logits),
            1e-3);
}

// A C++ network away from its initial weights, written as a state dict for Python.
std::string WriteStateOfPerturbedNetwork(Gpt& network, const std::string& name) {
  {
    torch::NoGradGuard no_grad;
    for (auto& parameter : network.parameters()) parameter.add_(torch::randn_like(parameter) * 0.1);
  }
  const std::string path = ScratchDir() + "/" + name;
  torch_model::WriteStateDict(path, network.StateDict());
  return path;
}

TEST_F(GptPythonTest, PythonGivesItsLogitsFromTheStateDictItWrites) {
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias on" : "bias off");
    torch::manual_seed(3);
    Gpt network(TinyConfig(bias));
    const std::string state = WriteStateOfPerturbedNetwork(network, "cpp_state.pt");
    const std::string logits_path = ScratchDir() + "/python_logits.pt";
    RunReference("logits " + state + " " + Fixture("batch.pt") + " " + logits_path + " 4");
    const torch::Tensor logits = EvalLogits(network, ReadTensors(Fixture("batch.pt")).at("idx"));
    const double difference = MaxDifference(logits, ReadTensors(logits_path).at("logits"));
    EXPECT_LE(difference, kTolerance);
    std::cout << "Python from the C++ state dict, bias " << bias << ": largest logit difference "
              << difference << "\n";
  }
}

TEST_F(GptPythonTest, ReadsTheTorchScriptExportOfThePythonClass) {
  const std::string path = Fixture("gpt_script.pt");
  torch::jit::Module script = torch::jit::load(path);
  script.eval();
  const torch::Tensor ids = ReadTensors(Fixture("batch.pt")).at("idx");
  torch::Tensor script_logits;
  {
    torch::NoGradGuard no_grad;
    script_logits = script.forward({ids}).toTensor();
  }
  torch::manual_seed(0);  // export_model.py's default --seed
  Gpt same_seed(TinyConfig());
  EXPECT_LE(MaxDifference(EvalLogits(same_seed, ids), script_logits), kTolerance);
  torch::manual_seed(1);
  Gpt loaded(TinyConfig());
  loaded.LoadStateDict(ReadTensorList(path), path);
  EXPECT_LE(MaxDifference(EvalLogits(loaded, ids), script_logits), kTolerance);
}

std::string Generate(const std::string& model, const std::string& arguments) {
  int exit_code = -1;
  const std::string output =
      dpl::testing::Capture(std::string(DPL_TEST_PYTHON) + " " + std::string(DPL_TEST_SOURCE_DIR) +
                                "/tools/generate.py " + model + " " + arguments + " 2>&1",
                            &exit_code);
  EXPECT_EQ(exit_code, 0) << output;
  return output;
}

TEST_F(GptPythonTest, GenerateSamplesTextFromAStateDictAndATorchScriptExport) {
  torch::manual_seed(4);
  Gpt network(TinyConfig());
  const std::string state = ScratchDir() + "/fresh.pt";
  torch_model::WriteStateDict(state, network.StateDict());
  const std::string sampled = Generate(state, "--heads 4 --prompt Once --tokens 24 --seed 3");
  EXPECT_EQ(sampled.rfind("Once", 0), 0u) << sampled;
  EXPECT_GT(sampled.size(), std::string("Once\n").size() + 8) << sampled;
  EXPECT_EQ(Generate(state, "--heads 4 --prompt Once --tokens 24 --seed 3"), sampled);
  EXPECT_NE(Generate(state, "--heads 4 --prompt Once --tokens 24 --seed 4"), sampled);
  const std::string scripted = Generate(Fixture("gpt_script.pt"), "--prompt Hi --tokens 16");
  EXPECT_EQ(scripted.rfind("Hi", 0), 0u) << scripted;
  int exit_code = -1;
  const std::string refused =
      dpl::testing::Capture(std::string(DPL_TEST_PYTHON) + " " + std::string(DPL_TEST_SOURCE_DIR) +
                                "/tools/generate.py " + state + " 2>&1",
                            &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_EQ(refused,
            "generate.py: a state dict does not say how many attention heads the network has: "
            "give --heads (the model option heads it was trained with)\n");
}

// The likeliest continuation of `prompt`, token by token, each step seeing the last block tokens
// (generate.py's window).
std::vector<int64_t> Greedy(Gpt& network, const std::string& prompt, int tokens) {
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  const size_t block = static_cast<size_t>(network.config().block);
  for (int step = 0; step < tokens; ++step) {
    const size_t start = ids.size() > block ? ids.size() - block : 0;
    const std::vector<int64_t> context(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.end());
    const torch::Tensor input = torch::tensor(context, torch::kLong).unsqueeze(0);
    const torch::Tensor last = EvalLogits(network, input).select(1, input.size(1) - 1);
    ids.push_back(last.argmax(-1).item<int64_t>());
  }
  return ids;
}

TEST_F(GptPythonTest, GenerateContinuesAsTheCppNetworkWithTemperatureZero) {
  torch::manual_seed(6);
  Gpt network(TinyConfig());
  const std::string state = WriteStateOfPerturbedNetwork(network, "greedy.pt");
  const std::vector<int64_t> ids = Greedy(network, "ab", 40);  // longer than the block of 32
  std::string list;
  for (const int64_t id : ids) list += std::to_string(id) + ",";
  int exit_code = -1;
  const std::string decoded =
      dpl::testing::Capture(std::string(DPL_TEST_PYTHON) + " -c 'print(bytes([" + list +
                                "]).decode(\"utf-8\", errors=\"replace\"))'",
                            &exit_code);
  ASSERT_EQ(exit_code, 0);
  EXPECT_EQ(Generate(state, "--heads 4 --prompt ab --tokens 40 --temperature 0"), decoded);
}

class GptPythonClassTest : public ::testing::TestWithParam<const char*> {};

// gpt_reference.py's checks of the Python class on its own.
TEST_P(GptPythonClassTest, Passes) {
  if (!dpl::testing::PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const std::string output = RunReference(GetParam());
  EXPECT_EQ(output.find("FAILED"), std::string::npos) << output;
  std::cout << output;
}

INSTANTIATE_TEST_SUITE_P(Checks, GptPythonClassTest,
                         ::testing::Values("script", "causal", "init", "refusals", "counts"));

}  // namespace
}  // namespace dpl::gpt_test
