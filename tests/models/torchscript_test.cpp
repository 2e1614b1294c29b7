// The TorchScript model plugin (models/torchscript) through the C ABI, on modules that
// tests/models/fixtures.py exports from Python with tools/export_model.py.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "dpl/model.h"
#include "plugin_driver.hpp"

namespace {

using namespace dpl_test;

class TorchScript : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PythonHasTorch())
      GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  }

  static std::string File(const std::string& name) { return FixtureDir() + "/" + name; }
  static std::string Options(const std::string& name, const std::string& more = "") {
    return "file=" + File(name) + more;
  }

  // The message of creating the torchscript model with `options` (and `config`), whose status
  // must be `expected`.
  static std::string Refusal(const std::string& options, dpl_status expected,
                             dpl_model_config_v4 config = Config("")) {
    config.options = options.c_str();
    std::string message;
    EXPECT_EQ(CreateStatus(Plugin("torchscript"), config, &message), expected) << options;
    return message;
  }

  // Files that are not a TorchScript module the model can train, each refused naming why.
  static void ExpectRefusedArchives(const std::string& prefix) {
    const std::string how =
        "; write it with torch.jit.save(torch.jit.script(module), path) or tools/export_model.py";
    EXPECT_EQ(Refusal(Options("not_an_archive.pt"), DPL_ERR_INVALID_ARGUMENT),
              prefix + "TorchScript file " + File("not_an_archive.pt") +
                  " is not a TorchScript archive (not a zip file)" + how);
    EXPECT_EQ(Refusal(Options("convnet_python_state.pt"), DPL_ERR_INVALID_ARGUMENT),
              prefix + "TorchScript file " + File("convnet_python_state.pt") +
                  " is not a TorchScript archive but a torch.save file (a pickle, such as a state "
                  "dict)" +
                  how);
    EXPECT_EQ(Refusal(Options("no_parameters.pt"), DPL_ERR_INVALID_ARGUMENT),
              prefix + "TorchScript file " + File("no_parameters.pt") +
                  ": the module has no parameters to train (none with requires_grad)");
    EXPECT_EQ(Refusal(Options("five_classes.pt"), DPL_ERR_INVALID_ARGUMENT),
              prefix + "TorchScript file " + File("five_classes.pt") +
                  ": forward returns shape (2, 5) for a batch of shape (2, 1, 28, 28); the nll "
                  "loss needs (2, 10), one row of class scores per sample");
    EXPECT_EQ(
        Refusal(Options("logits.pt"), DPL_ERR_INVALID_ARGUMENT),
        prefix + "TorchScript file " + File("logits.pt") +
            ": with loss=nll forward must return log-probabilities (end it with "
            "log_softmax), but on a zero batch exp(output) sums to 10.8 over the classes, not "
            "1; use loss=cross_entropy for a module that returns logits");
  }
};

// Whether the torch the plugin builds against (dpl's Python's, DPL_TEST_PYTHON) deprecates
// TorchScript: 2.11 and later.
bool TorchDeprecatesTorchScript() {
  int exit_code = -1;
  const std::string answer = Capture(std::string(DPL_TEST_PYTHON) +
                                         " -c 'import torch; major, minor = "
                                         "torch.__version__.split(\".\")[:2]; "
                                         "print((int(major), int(minor)) >= (2, 11))'",
                                     &exit_code);
  return exit_code == 0 && answer == "True\n";
}

std::atomic<int> g_ready{0};
void CountReady(void*, uint32_t) {
  ++g_ready;
}

// Plain SGD on one batch: returns the first and the last loss.
std::pair<float, float> Train(const Model& model, const Batch& batch, int steps,
                              float learning_rate) {
  const float first = TrainStep(model, batch);
  float last = first;
  for (int step = 0; step < steps; ++step) {
    Sgd(model, learning_rate);
    EXPECT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    last = TrainStep(model, batch);
  }
  return {first, last};
}

TEST_F(TorchScript, TrainsAScriptedCnnWithBatchNormAndAResidualConnection) {
  const std::string options = Options("cnn_scripted.pt");
  const Model model(Plugin("torchscript"), Config(options.c_str(), 2));
  const dpl_model_info_v4 info = model.Info();
  ASSERT_EQ(info.input_ndim, 3u);
  EXPECT_EQ(info.num_classes, 10);
  ASSERT_EQ(info.parameter_count, 10u);
  const std::vector<std::string> names = {"stem.weight", "stem.bias", "bn1.weight", "bn1.bias",
                                          "conv.weight", "conv.bias", "bn2.weight", "bn2.bias",
                                          "fc.weight",   "fc.bias"};
  const auto parameters = model.Parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_EQ(parameters[i].name, names[i]);
    if (i + 1 < parameters.size()) {  // Note [Flat gradients]: back to back
      EXPECT_EQ(Floats(parameters[i].gradient) + Elements(parameters[i].gradient),
                Floats(parameters[i + 1].gradient));
    }
  }
  ASSERT_EQ(info.buffer_count, 6u);
  EXPECT_STREQ(model.Buffer(0).name, "bn1.running_mean");
  EXPECT_STREQ(model.Buffer(5).name, "bn2.num_batches_tracked");
  EXPECT_EQ(dpl_test::BufferFlags(info), DPL_MODEL_BROADCAST_BUFFERS);

  g_ready = 0;
  ASSERT_EQ(model.plugin().set_gradient_ready_callback(model.get(), &CountReady, nullptr), DPL_OK);
  const Batch batch(32);
  const auto [first, last] = Train(model, batch, 12, 0.5f);
  EXPECT_EQ(g_ready.load(), 13 * 10) << "one callback per parameter per step";
  EXPECT_LT(last, first - 0.1f) << "first " << first << " last " << last;
  EXPECT_EQ(*static_cast<const int64_t*>(model.Buffer(5).value.data), 13);

  // eval_step is deterministic (no dropout, running statistics) and leaves train mode on.
  const Evaluation once = EvalStep(model, batch), again = EvalStep(model, batch);
  EXPECT_EQ(once.loss_sum, again.loss_sum);
  EXPECT_NE(TrainStep(model, batch), TrainStep(model, batch)) << "dropout in train mode";
}

// Note [Replaced gradients]: after zero_gradients the next backward replaces each gradient; one
// that backward does not reach (a layer forward never uses) becomes zero, whatever it held.
TEST_F(TorchScript, ABackwardAfterZeroGradientsReplacesEveryGradientAndZeroesUnreachedOnes) {
  const std::string options = Options("spare_layer.pt");
  const Model model(Plugin("torchscript"), Config(options.c_str(), 2));
  EXPECT_NE(model.Info().flags & DPL_MODEL_REPLACED_GRADIENTS, 0u);
  const auto parameters = model.Parameters();
  ASSERT_EQ(parameters.size(), 4u);
  ASSERT_STREQ(parameters[2].name, "spare.weight");
  const Batch batch(8);
  TrainStep(model, batch);
  const std::vector<float> once = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  // What a host might leave in the gradients' memory: a stale sum, NaN in the spare layer.
  for (const auto& parameter : parameters) {
    float* gradient = Floats(parameter.gradient);
    const bool spare = std::string(parameter.name).rfind("spare.", 0) == 0;
    for (int64_t i = 0; i < Elements(parameter.gradient); ++i) {
      gradient[i] = spare ? std::nanf("") : 3.0f * gradient[i] + 1.0f;
    }
  }
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  TrainStep(model, batch);
  const std::vector<float> replaced = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  ASSERT_EQ(replaced.size(), once.size());
  size_t nonzero = 0;
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_EQ(replaced[i], once[i]) << "element " << i;
    nonzero += once[i] != 0.0f ? 1 : 0;
  }
  EXPECT_GT(nonzero, 0u);
  for (size_t p = 2; p < 4; ++p) {  // the spare layer's
    for (int64_t i = 0; i < Elements(parameters[p].gradient); ++i) {
      ASSERT_EQ(Floats(parameters[p].gradient)[i], 0.0f) << parameters[p].name;
    }
  }
  // A second backward without zero_gradients adds, as before (--grad-accum).
  TrainStep(model, batch);
  const std::vector<float> twice = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(twice[i], 2.0f * once[i]) << i;
}

TEST_F(TorchScript, TrainsATracedModuleAndSaysWhichLayersIgnoreTheMode) {
  const std::string options = Options("cnn_traced.pt");
  dpl_model_config_v4 config = Config(options.c_str(), 2);
  LogLines log;
  log.CollectFrom(&config);
  const Model model(Plugin("torchscript"), config);
  const Batch batch(32);
  const auto [first, last] = Train(model, batch, 12, 0.5f);
  EXPECT_LT(last, first - 0.1f) << "first " << first << " last " << last;
  std::vector<std::string> lines = log.lines();
  if (TorchDeprecatesTorchScript()) {  // said once, before all else
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0].rfind("1 TorchScript is deprecated from torch 2.11 on, in favour of "
                             "torch.export; libtorch ",
                             0),
              0u)
        << lines[0];
    EXPECT_TRUE(lines[0].size() > File("cnn_traced.pt").size() &&
                lines[0].substr(lines[0].size() - File("cnn_traced.pt").size()) ==
                    File("cnn_traced.pt"))
        << lines[0];
    lines.erase(lines.begin());
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "2 TorchScript file " + File("cnn_traced.pt") +
                          ": batch_norm (train), dropout (train) run in the mode shown whatever "
                          "train/eval mode is set (the mode is recorded when a module is "
                          "traced); script the module (torch.jit.script, tools/export_model.py "
                          "without --trace) for layers that follow the mode");
  EXPECT_EQ(lines[1],
            "1 model torchscript 1.0.0: 10 parameter tensors, 786 elements, on cpu, 6 buffers");
}

TEST_F(TorchScript, SaveStateIsTheTrainedModuleInEvalModeForTorchJitLoad) {
  const std::string options = Options("cnn_scripted.pt");
  const Model model(Plugin("torchscript"), Config(options.c_str(), 4));
  Train(model, Batch(16), 3, 0.1f);
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/cnn_trained.pt";
  ASSERT_EQ(model.plugin().save_state(model.get(), path.c_str()), DPL_OK) << model.error();
  const Batch batch = Batch::FromFile(File("batch.bin"));
  const Evaluation plugin = EvalStep(model, batch);
  const std::string line = ResultLine(RunFixtures("script " + path + " " + File("batch.bin")));
  EXPECT_EQ(Field(line, "training"), "0") << line;
  ASSERT_FALSE(Field(line, "loss_sum").empty()) << line;
  EXPECT_NEAR(std::stod(Field(line, "loss_sum")), plugin.loss_sum, 1e-4);
  EXPECT_EQ(std::stoll(Field(line, "correct")), plugin.correct);
  // The model stays in train mode after saving.
  EXPECT_NE(TrainStep(model, batch), TrainStep(model, batch));

  // Its own file and a Python state dict load into the parameters and buffers by name.
  const Model fresh(Plugin("torchscript"), Config(options.c_str(), 4));
  ASSERT_EQ(fresh.plugin().load_state(fresh.get(), path.c_str()), DPL_OK) << fresh.error();
  EXPECT_EQ(fresh.Values(), model.Values());
  EXPECT_EQ(EvalStep(fresh, batch).loss_sum, plugin.loss_sum);
}

// Note [TorchScript's batched products] (models/torchscript/matmul_rewrite.hpp) reaches into an
// if's branches; the product there is counted, so the export calls aten::matmul again and loads
// in Python without dpl (it once kept the plugin's operator: counted 0, it was not rewritten
// back).
TEST_F(TorchScript, AProductInsideAnIfIsCountedAndExportedAsTorchsOwn) {
  const std::string options = Options("branched_product.pt");
  dpl_model_config_v4 config = Config(options.c_str(), 2);
  LogLines log;
  log.CollectFrom(&config);
  const Model model(Plugin("torchscript"), config);
  for (const std::string& line : log.lines()) {
    if (line.find("matrix product(s)") == std::string::npos) continue;
    EXPECT_NE(line.find(": 1 matrix product(s) (aten::matmul)"), std::string::npos) << line;
  }
  Train(model, Batch(16), 3, 0.1f);
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/branched_product_trained.pt";
  ASSERT_EQ(model.plugin().save_state(model.get(), path.c_str()), DPL_OK) << model.error();
  const Batch batch = Batch::FromFile(File("batch.bin"));
  const Evaluation plugin = EvalStep(model, batch);
  const std::string python = RunFixtures("script " + path + " " + File("batch.bin"));
  const std::string line = ResultLine(python);
  ASSERT_FALSE(Field(line, "loss_sum").empty()) << python;
  EXPECT_NEAR(std::stod(Field(line, "loss_sum")), plugin.loss_sum, 1e-4);
  EXPECT_EQ(std::stoll(Field(line, "correct")), plugin.correct);
}

TEST_F(TorchScript, TheRecipeConvNetLoadsAPythonStateDict) {
  const std::string options = Options("convnet_scripted.pt");
  const Model model(Plugin("torchscript"), Config(options.c_str()));
  const std::string state = File("convnet_python_state.pt");
  ASSERT_EQ(model.plugin().load_state(model.get(), state.c_str()), DPL_OK) << model.error();
  std::ifstream expected_file(File("convnet_python_eval.txt"));
  std::string expected;
  std::getline(expected_file, expected);
  const Evaluation plugin = EvalStep(model, Batch::FromFile(File("batch.bin")));
  EXPECT_NEAR(plugin.loss_sum, std::stod(Field(expected, "loss_sum")), 1e-4);
  EXPECT_EQ(plugin.correct, std::stoll(Field(expected, "correct")));
  // The C++ ConvNet and the scripted one share their parameter names and so their state files.
  const Model cpp("convnet", "", 0);
  ASSERT_EQ(cpp.plugin().load_state(cpp.get(), state.c_str()), DPL_OK);
  EXPECT_EQ(cpp.Values(), model.Values());
}

TEST_F(TorchScript, DropoutRepeatsAfterARandomStateRestore) {
  const std::string options = Options("cnn_scripted.pt");
  const Model model(Plugin("torchscript"), Config(options.c_str(), 6));
  const Batch batch(8);
  const std::vector<uint8_t> state = model.RngState();
  const float first = TrainStep(model, batch);
  EXPECT_NE(TrainStep(model, batch), first);
  ASSERT_EQ(model.plugin().set_rng_state(model.get(), state.data(), state.size()), DPL_OK);
  // In train mode BatchNorm normalises with the batch's statistics, so only dropout differs.
  EXPECT_EQ(TrainStep(model, batch), first);
}

TEST_F(TorchScript, CrossEntropyAndMseTrainModulesThatReturnLogits) {
  for (const char* loss : {",loss=cross_entropy", ",loss=mse"}) {
    const std::string options = Options("logits.pt", loss);
    const Model model(Plugin("torchscript"), Config(options.c_str(), 3));
    const Batch batch(16);
    ASSERT_EQ(model.plugin().set_mode(model.get(), DPL_MODEL_MODE_EVAL), DPL_OK);
    const float mean = TrainStep(model, batch);
    EXPECT_NEAR(EvalStep(model, batch).loss_sum / 16, mean, 1e-5) << loss;
    ASSERT_EQ(model.plugin().set_mode(model.get(), DPL_MODEL_MODE_TRAIN), DPL_OK);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    const auto [first, last] = Train(model, batch, 8, 0.2f);
    EXPECT_LT(last, first) << loss;
  }
}

TEST_F(TorchScript, Bf16ForwardIsCloseToFp32) {
  const std::string options = Options("cnn_scripted.pt");
  const Model fp32(Plugin("torchscript"), Config(options.c_str()));
  const Model bf16(Plugin("torchscript"),
                   WithPrecision(Config(options.c_str()), DPL_PRECISION_BF16));
  ASSERT_EQ(fp32.plugin().set_mode(fp32.get(), DPL_MODEL_MODE_EVAL), DPL_OK);
  ASSERT_EQ(bf16.plugin().set_mode(bf16.get(), DPL_MODEL_MODE_EVAL), DPL_OK);
  const Batch batch(16);
  const float loss32 = TrainStep(fp32, batch), loss16 = TrainStep(bf16, batch);
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);
  EXPECT_NE(loss16, loss32) << "the forward pass must run in bfloat16";
  std::string message;
  EXPECT_EQ(CreateStatus(Plugin("torchscript"),
                         WithPrecision(Config(options.c_str()), DPL_PRECISION_FP16), &message),
            DPL_ERR_UNSUPPORTED);
}

TEST_F(TorchScript, RefusesBadFilesAndOptionsBeforeTheFirstStep) {
  const std::string prefix = "model \"torchscript\": ";
  EXPECT_EQ(Refusal("", DPL_ERR_INVALID_ARGUMENT),
            prefix +
                "option \"file\" is missing: --model-options file=PATH names the TorchScript "
                "module to train (torch.jit.save(torch.jit.script(module), PATH), or "
                "tools/export_model.py)");
  const std::string missing = File("no_such_module.pt");
  EXPECT_EQ(Refusal("file=" + missing, DPL_ERR_IO),
            prefix + "TorchScript file " + missing + " cannot be read: No such file or directory");
  ExpectRefusedArchives(prefix);
  const std::string wrong_shape = Refusal(Options("cnn_scripted.pt"), DPL_ERR_INVALID_ARGUMENT,
                                          WithData(Config(""), {3, 28, 28}, 10));
  EXPECT_EQ(wrong_shape.rfind(prefix + "TorchScript file " + File("cnn_scripted.pt") +
                                  ": forward fails on a zero batch of shape (2, 3, 28, 28) (the "
                                  "data's samples are (3, 28, 28)): ",
                              0),
            0u)
      << wrong_shape;
  EXPECT_EQ(
      Refusal(Options("cnn_scripted.pt"), DPL_ERR_INVALID_ARGUMENT, WithData(Config(""), {}, 10)),
      prefix +
          "the host does not say the data's sample shape (config input_ndim 0); a "
          "TorchScript model takes its input shape from the data");
  EXPECT_EQ(Refusal(Options("cnn_scripted.pt", ",loss=hinge"), DPL_ERR_INVALID_ARGUMENT),
            prefix + "option \"loss\" must be one of nll|cross_entropy|mse, got \"hinge\"");
  EXPECT_EQ(Refusal(Options("cnn_scripted.pt", ",colour=blue"), DPL_ERR_INVALID_ARGUMENT),
            prefix +
                "unknown option \"colour\" in --model-options; known options: file, loss, "
                "broadcast_buffers");
  // Without classes from the host, the module's output says how many.
  const std::string options = Options("five_classes.pt");
  const Model five(Plugin("torchscript"), WithData(Config(options.c_str()), {1, 28, 28}, 0));
  EXPECT_EQ(five.Info().num_classes, 5);
}

// tools/export_model.py refuses what it cannot export with one line naming the problem.
TEST_F(TorchScript, ExportModelSaysWhatItCannotExport) {
  int exit_code = -1;
  const std::string output =
      Capture("cd '" + std::string(DPL_TEST_SOURCE_DIR) + "/tests/models' && " +
                  std::string(DPL_TEST_PYTHON) + " " + std::string(DPL_TEST_SOURCE_DIR) +
                  "/tools/export_model.py " + std::string(DPL_TEST_BINARY_DIR) +
                  "/unwritten.pt --module fixture_models:Missing 2>&1",
              &exit_code);
  EXPECT_EQ(exit_code, 1);
  EXPECT_EQ(output,
            "export_model.py: --module 'fixture_models:Missing': fixture_models has no "
            "torch.nn.Module class Missing\n");
}

}  // namespace
