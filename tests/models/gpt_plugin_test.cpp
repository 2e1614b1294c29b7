// The gpt model plugin (models/gpt/gpt_plugin.cpp) through the C ABI, as the launcher drives it,
// against tools/gpt_model.py's GPT (dpl's Python (torch, numpy, ...); skipped without): the loss of
// the Python class's state dict loaded as --init-from loads it, exports Python loads strictly,
// typed samples and the data it refuses; and a TorchScript export of the Python class trained
// through the torchscript plugin on token data, also with the plugin's own optimizer.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "dpl/torch_model/batched_matmul.hpp"
#include "gpt_test_support.hpp"
#include "plugin_driver.hpp"

namespace dpl::gpt_test {
namespace {

using dpl_test::CreateStatus;
using dpl_test::Model;
using dpl_test::Plugin;
using dpl_test::WithTokens;

constexpr double kTolerance = 1e-5;  // losses, the plugin against Python
constexpr const char* kTinyOptions = "layers=2,heads=4,dim=64";

// One batch of token ids and next tokens as DLTensors over `idx` and `targets` (int64 (n, T)).
struct TokenBatch {
  TokenBatch(torch::Tensor ids, torch::Tensor next)
      : idx(ids.contiguous()), targets(next.contiguous()) {
    input = View(idx);
    target = View(targets);
  }
  static DLTensor View(const torch::Tensor& tensor) {
    DLTensor view{};
    view.data = tensor.data_ptr();
    view.device = {kDLCPU, 0};
    view.ndim = static_cast<int32_t>(tensor.dim());
    view.dtype = {kDLInt, 64, 1};
    view.shape = const_cast<int64_t*>(tensor.sizes().data());
    return view;
  }
  torch::Tensor idx, targets;
  DLTensor input{}, target{};
};

TokenBatch FixtureBatch() {
  const auto batch = ReadTensors(Fixture("batch.pt"));
  return TokenBatch(batch.at("idx"), batch.at("targets"));
}

dpl_model_config_v4 TinyGptConfig(const char* options, int64_t block = 32) {
  return WithTokens(dpl_test::Config(options), block, 256);
}

dpl_eval_result_v4 Evaluate(const Model& model, const TokenBatch& batch) {
  dpl_eval_result_v4 result{};
  result.struct_size = sizeof result;
  EXPECT_EQ(model.plugin().eval_step(model.get(), &batch.input, &batch.target, &result), DPL_OK)
      << model.error();
  return result;
}

float Train(const Model& model, const TokenBatch& batch) {
  float loss = NAN;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss), DPL_OK)
      << model.error();
  return loss;
}

class GptPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dpl::testing::PythonHasTorch())
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  }
};

TEST_F(GptPluginTest, DescribesTokenSamplesAndTheDatasVocabulary) {
  const Model model(Plugin("gpt"), TinyGptConfig(kTinyOptions));
  const dpl_model_info_v4 info = model.Info();
  EXPECT_EQ(info.num_classes, 256);
  EXPECT_EQ(info.input.dtype.code, kDLInt);
  EXPECT_EQ(info.input.dtype.bits, 64);
  ASSERT_EQ(info.input.ndim, 1u);
  EXPECT_EQ(info.input.shape[0], 32);
  ASSERT_EQ(info.target.ndim, 1u);
  EXPECT_EQ(info.target.shape[0], 32);
  EXPECT_NE(info.flags & DPL_MODEL_DEVICE_OPTIMIZER, 0u);  // the SDK's (device_optimizer.hpp)
  EXPECT_NE(model.plugin().set_optimizer, nullptr);
  int64_t elements = 0;
  for (const auto& parameter : model.Parameters()) {
    elements += dpl_test::Elements(parameter.value);
  }
  EXPECT_EQ(elements, 118528);  // the tied weight once (models/gpt/README.md)
}

// --init-from: the plugin's load_state takes the Python class's state dict (lm_head.weight and
// all) and gives its loss on the same batch, in eval_step and in train_step (no dropout).
TEST_F(GptPluginTest, GivesPythonsLossFromItsStateDict) {
  const TokenBatch batch = FixtureBatch();
  for (const bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias on" : "bias off");
    const std::string suffix = bias ? "1.pt" : "0.pt";
    const Model model(Plugin("gpt"),
                      TinyGptConfig(bias ? kTinyOptions : "layers=2,heads=4,dim=64,bias=0"));
    const std::string state = Fixture("state_bias" + suffix);
    ASSERT_EQ(model.plugin().load_state(model.get(), state.c_str()), DPL_OK) << model.error();
    const double python = ReadTensors(Fixture("expected_bias" + suffix)).at("loss").item<double>();
    const dpl_eval_result_v4 result = Evaluate(model, batch);
    EXPECT_EQ(result.elements, batch.targets.numel());
    EXPECT_NEAR(result.loss_sum / double(result.elements), python, kTolerance);
    EXPECT_NEAR(Train(model, batch), python, kTolerance);
    std::cout << "bias " << bias << ": loss " << result.loss_sum / double(result.elements)
              << " (Python " << python << ")\n";
  }
}

// --export: save_state after training writes nanoGPT's state dict, which Python's GPT loads
// strictly (gpt_reference.py logits); its logits give the plugin's loss and arg-max counts.
TEST_F(GptPluginTest, ExportLoadsIntoPythonStrictlyWithThePluginsLogits) {
  const TokenBatch batch = FixtureBatch();
  const Model model(Plugin("gpt"), TinyGptConfig(kTinyOptions, 32));
  const float first = Train(model, batch);
  for (int step = 0; step < 5; ++step) {
    dpl_test::Sgd(model, 0.5f);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    Train(model, batch);
  }
  const dpl_eval_result_v4 trained = Evaluate(model, batch);
  EXPECT_LT(trained.loss_sum / double(trained.elements), first) << "SGD lowers the loss";
  const std::string exported = ScratchDir() + "/plugin_export.pt";
  const std::string logits = ScratchDir() + "/plugin_export_logits.pt";
  ASSERT_EQ(model.plugin().save_state(model.get(), exported.c_str()), DPL_OK) << model.error();
  const std::string output =
      RunReference("logits " + exported + " " + Fixture("batch.pt") + " " + logits + " 4");
  EXPECT_NE(output.find("keys 29 "), std::string::npos) << output;  // lm_head.weight included
  const torch::Tensor python = ReadTensors(logits).at("logits");
  const double python_loss = gpt::GptLoss(python, batch.targets).item<double>();
  const int64_t python_correct = python.argmax(-1).eq(batch.targets).sum().item<int64_t>();
  EXPECT_NEAR(trained.loss_sum / double(trained.elements), python_loss, kTolerance);
  EXPECT_EQ(trained.correct, python_correct);
  // The C++ network from the same file gives the same logits element for element.
  gpt::Gpt network(TinyConfig());
  network.LoadStateDict(ReadTensorList(exported), exported);
  network.eval();
  torch::NoGradGuard no_grad;
  EXPECT_LE(MaxDifference(network.forward(batch.idx), python), kTolerance);
}

TEST_F(GptPluginTest, RefusesABlockThatDiffersFromTheDataNamingBoth) {
  std::string message;
  EXPECT_EQ(
      CreateStatus(Plugin("gpt"), TinyGptConfig("layers=2,heads=4,dim=64,block=64", 32), &message),
      DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"gpt\": option \"block\" is 64 but the data's samples hold 32 tokens; give the "
            "model block=32 or the data block=64");
  // Without the option the block is the data's.
  const Model model(Plugin("gpt"), TinyGptConfig(kTinyOptions, 16));
  EXPECT_EQ(model.Info().input.shape[0], 16);
}

TEST_F(GptPluginTest, RefusesDataThatIsNotTokens) {
  std::string message;
  EXPECT_EQ(CreateStatus(Plugin("gpt"), dpl_test::Config(kTinyOptions), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"gpt\": the data has float32 (1, 28, 28) samples with int64 () targets; this "
            "model takes integer token ids (T) with an integer target per position (T); train it "
            "on such data, or train a model that takes this data");
  // And batches of another dtype or length than the data it was built for.
  const Model model(Plugin("gpt"), TinyGptConfig(kTinyOptions));
  const TokenBatch batch(torch::zeros({2, 31}, torch::kLong), torch::zeros({2, 31}, torch::kLong));
  float loss = 0;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.error()),
            "model \"gpt\": input must be an int64 tensor of shape (batch, 32) with batch >= 1; "
            "got (2, 31) of dtype code 0 bits 64");
}

// A TorchScript GPT of the Python class (export_model.py --module tools/gpt_model.py:GPT) trains
// through the torchscript plugin on token data: the loss over every position falls.
TEST_F(GptPluginTest, TorchScriptGptOfThePythonClassTrainsOnTokens) {
  const std::string options = "file=" + Fixture("gpt_script.pt") + ",loss=cross_entropy";
  const Model model(Plugin("torchscript"), WithTokens(dpl_test::Config(options.c_str()), 32, 256));
  const dpl_model_info_v4 info = model.Info();
  EXPECT_EQ(info.num_classes, 256);
  EXPECT_EQ(info.target.ndim, 1u);
  // The tied output weights are one parameter, as in the C++ plugin (Note [Tied parameters]).
  const Model cpp(Plugin("gpt"), TinyGptConfig(kTinyOptions, 32));
  EXPECT_EQ(info.parameter_count, cpp.Info().parameter_count);
  const TokenBatch batch = FixtureBatch();
  const float first = Train(model, batch);
  EXPECT_NEAR(first, std::log(256.0), 0.1) << "nanoGPT's init predicts nearly uniformly";
  float last = first;
  for (int step = 0; step < 20; ++step) {
    dpl_test::Sgd(model, 1.0f);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    last = Train(model, batch);
  }
  EXPECT_LT(last, first - 0.5f);
  const dpl_eval_result_v4 result = Evaluate(model, batch);
  EXPECT_EQ(result.elements, batch.targets.numel());
  std::cout << "torchscript gpt: loss " << first << " -> " << last << "\n";
}

// The same scripted GPT trains with the optimizer the plugin runs itself (the SDK's Note [Device
// optimizer]): AdamW with nanoGPT's groups updates the script module's own tensors in place.
TEST_F(GptPluginTest, TorchScriptGptTrainsWithTheModelsOwnOptimizer) {
  const std::string options = "file=" + Fixture("gpt_script.pt") + ",loss=cross_entropy";
  const Model model(Plugin("torchscript"), WithTokens(dpl_test::Config(options.c_str()), 32, 256));
  ASSERT_NE(model.Info().flags & DPL_MODEL_DEVICE_OPTIMIZER, 0u);
  const std::vector<double> decay = dpl_test::GroupDecay(model, 0.1);
  dpl_optimizer_config_v4 config =
      dpl_test::OptimizerConfig(DPL_OPTIMIZER_ADAMW, decay, model.ParameterElements());
  config.beta2 = 0.99;
  ASSERT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_OK) << model.error();
  const TokenBatch batch = FixtureBatch();
  const float first = Train(model, batch);
  float last = first;
  for (int64_t step = 1; step <= 20; ++step) {
    ASSERT_EQ(dpl_test::ApplyUpdate(model, step, 1e-2, 1.0), DPL_OK) << model.error();
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    last = Train(model, batch);
  }
  EXPECT_LT(last, first - 1.0f);
  std::cout << "torchscript gpt, its own AdamW: loss " << first << " -> " << last << "\n";
}

// Note [TorchScript's batched products]: the scripted GPT's attention products go through the
// SDK's BatchedMatmul where it has its BLAS, its masked scores in one pass (Note [TorchScript's
// masked scores]), and says so; the module it exports calls libtorch's own matmul, mul and
// masked_fill again, loads without dpl and gives the plugin's loss.
TEST_F(GptPluginTest, TorchScriptGptRunsItsProductsMatrixByMatrixAndExportsTorchsOwnOps) {
  const std::string file = Fixture("gpt_script.pt");
  const std::string options = "file=" + file + ",loss=cross_entropy";
  dpl_model_config_v4 config = WithTokens(dpl_test::Config(options.c_str()), 32, 256);
  dpl_test::LogLines log;
  log.CollectFrom(&config);
  const Model model(Plugin("torchscript"), config);
  const std::vector<std::string> lines = log.lines();
  const std::string said = "1 TorchScript file " + file +
                           ": 2 matrix product(s) (aten::matmul) run matrix by matrix through "
                           "the BLAS libtorch loaded, its batches over the worker's threads; 1 of "
                           "them scaled and masked in the same pass";
  const bool logged = std::find(lines.begin(), lines.end(), said) != lines.end();
  std::string all_lines;
  for (const std::string& line : lines) all_lines += line + "\n";
  // torch 2's gpt_model.py attends through F.scaled_dot_product_attention, one operator with no
  // aten::matmul to run matrix by matrix; torch 1.13's writes the two products out.
  const bool products = !DPL_LIBTORCH_HAS_SCALED_DOT_PRODUCT_ATTENTION;
  EXPECT_EQ(logged, products && torch_model::HasDirectSgemm()) << all_lines;
  const TokenBatch batch = FixtureBatch();
  for (int step = 0; step < 3; ++step) {
    Train(model, batch);
    dpl_test::Sgd(model, 0.5f);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  }
  const dpl_eval_result_v4 trained = Evaluate(model, batch);
  const std::string exported = ScratchDir() + "/torchscript_gpt_export.pt";
  ASSERT_EQ(model.plugin().save_state(model.get(), exported.c_str()), DPL_OK) << model.error();
  // The archive's code, as torch.jit.save wrote it (its records may be compressed).
  caffe2::serialize::PyTorchStreamReader archive(exported);
  size_t code_records = 0;
  for (const std::string& name : archive.getAllRecords()) {
    if (name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0) continue;
    ++code_records;
    const auto [data, size] = archive.getRecord(name);
    const std::string code(static_cast<const char*>(data.get()), size);
    EXPECT_EQ(code.find("dpl_torchscript"), std::string::npos) << name << ":\n" << code;
  }
  EXPECT_GT(code_records, 0u);
  torch::jit::Module loaded = torch::jit::load(exported);
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = loaded.forward({batch.idx}).toTensor();
  EXPECT_NEAR(gpt::GptLoss(logits, batch.targets).item<double>(),
              trained.loss_sum / double(trained.elements), kTolerance);
  // The module that trains keeps its operator: the export rewrote a copy.
  EXPECT_NEAR(Evaluate(model, batch).loss_sum, trained.loss_sum, 1e-9);
}

// Note [TorchScript's masked scores]: the plugin's operator gives the three operations' values:
// through the one pass for a -inf fill of a (T, T) mask or of nanoGPT's (1, 1, T, T) one, as the
// operations themselves for any other value or mask.
TEST_F(GptPluginTest, TorchScriptsMaskedScoresAreMulAndMaskedFill) {
  Plugin("torchscript");  // registers the operator
  const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("dpl_torchscript::scaled_masked_matmul", "")
          .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const c10::Scalar&,
                               const torch::Tensor&, const c10::Scalar&)>();
  torch::manual_seed(5);
  const torch::Tensor query = torch::randn({2, 4, 8, 16});
  const torch::Tensor key_t = torch::randn({2, 4, 8, 16}).transpose(-2, -1);
  const torch::Tensor future = torch::ones({8, 8}, torch::kBool).triu(1);
  const torch::Tensor product = torch_model::BatchedMatmul(query, key_t);
  const double minus_infinity = -std::numeric_limits<double>::infinity();
  const torch::Tensor per_head = future.expand({4, 8, 8}).contiguous();
  // Which path ran shows in the last autograd node: masked_fill's, or the product's own.
  const torch::Tensor learned_query = query.clone().requires_grad_(true);
  for (const torch::Tensor& mask : {future, future.view({1, 1, 8, 8}), per_head}) {
    for (const double fill : {minus_infinity, -1e4}) {
      SCOPED_TRACE("fill " + std::to_string(fill) + ", mask of " + std::to_string(mask.dim()) +
                   " dimensions");
      const torch::Tensor scores = op.call(learned_query, key_t, 0.25, mask, fill);
      // A scale of 1/4 rounds nothing: the same bits as the three operations.
      EXPECT_TRUE(torch::equal(scores, product.mul(0.25).masked_fill(mask, fill)));
      const bool one_matrix = mask.dim() == 2 || mask.size(0) == 1;
      // Without a BLAS of its own the operator adds the mask after torch::matmul: one pass still.
      const bool one_pass = one_matrix && fill == minus_infinity;
      const std::string last = scores.grad_fn()->name();
      EXPECT_EQ(last.find("MaskedFill") == std::string::npos, one_pass) << last;
    }
  }
}

}  // namespace
}  // namespace dpl::gpt_test
