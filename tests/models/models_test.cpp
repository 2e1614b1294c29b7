// The in-tree model plugins, loaded with dlopen from the build's plugin folder and driven through
// the C ABI only, as the launcher drives them.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dpl/model.h"
#include "plugin_driver.hpp"

namespace {

using namespace dpl_test;

// `tensor` is still at `before`'s address and holds `expected`, element for element.
void ExpectSameMemoryHolding(const DLTensor& tensor, const DLTensor& before,
                             const std::vector<float>& expected, const char* name) {
  EXPECT_EQ(tensor.data, before.data) << name;
  const float* values = Floats(tensor);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(values[i], expected[i]) << name << "[" << i << "]";
  }
}

TEST(ConvNet, DescribesTheRecipeShapes) {
  Model model("convnet", "");
  EXPECT_STREQ(model.plugin().header.name, "convnet");
  EXPECT_STREQ(model.plugin().header.version, "1.0.0");
  EXPECT_EQ(model.plugin().header.kind, static_cast<uint32_t>(DPL_PLUGIN_KIND_MODEL));
  EXPECT_EQ(model.plugin().header.abi_version, DPL_MODEL_ABI_VERSION_4);
  EXPECT_EQ(model.plugin().header.struct_size, sizeof(dpl_model_plugin_v4));
  const dpl_model_info_v4 info = model.Info();
  ASSERT_EQ(info.input_ndim, 3u);
  EXPECT_EQ(info.input_shape[0], 1);
  EXPECT_EQ(info.input_shape[1], 28);
  EXPECT_EQ(info.input_shape[2], 28);
  EXPECT_EQ(info.num_classes, 10);
  ASSERT_EQ(info.parameter_count, 8u);

  // The recipe: cn1 Conv2d(1,16,3), cn2 Conv2d(16,32,3), fc1 Linear(4608,64), fc2 Linear(64,10).
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"cn1.weight", {16, 1, 3, 3}},  {"cn1.bias", {16}},
      {"cn2.weight", {32, 16, 3, 3}}, {"cn2.bias", {32}},
      {"fc1.weight", {64, 4608}},     {"fc1.bias", {64}},
      {"fc2.weight", {10, 64}},       {"fc2.bias", {10}}};
  int64_t expected_elements = 0;
  for (const auto& entry : expected) {
    int64_t count = 1;
    for (auto extent : entry.second) count *= extent;
    expected_elements += count;
  }
  EXPECT_EQ(expected_elements, 1 * 16 * 9 + 16 + 16 * 32 * 9 + 32 + 4608 * 64 + 64 + 64 * 10 + 10);
  int64_t total_elements = 0;
  const auto parameters = model.Parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const dpl_parameter_v2& parameter = parameters[i];
    EXPECT_EQ(parameter.name, expected[i].first);
    ASSERT_EQ(parameter.value.ndim, static_cast<int32_t>(expected[i].second.size()));
    for (int32_t d = 0; d < parameter.value.ndim; ++d) {
      EXPECT_EQ(parameter.value.shape[d], expected[i].second[d]) << parameter.name;
      EXPECT_EQ(parameter.gradient.shape[d], expected[i].second[d]) << parameter.name;
    }
    EXPECT_EQ(parameter.value.dtype.code, kDLFloat);
    EXPECT_EQ(parameter.value.dtype.bits, 32);
    EXPECT_EQ(parameter.value.device.device_type, kDLCPU);
    EXPECT_NE(parameter.value.data, parameter.gradient.data);
    total_elements += Elements(parameter.value);
  }
  EXPECT_EQ(total_elements, expected_elements);
}

TEST(ConvNet, TrainStepGivesFiniteLossAndNonZeroGradientsAddedInPlace) {
  Model model("convnet", "dropout=0");
  const Batch batch(8);
  const auto before = model.Parameters();
  for (const auto& parameter : before) {
    const float* gradient = Floats(parameter.gradient);
    for (int64_t i = 0; i < Elements(parameter.gradient); ++i) ASSERT_EQ(gradient[i], 0.0f);
  }
  const float loss = TrainStep(model, batch);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(loss, 0.0f);
  std::vector<std::vector<float>> first_gradients;
  const auto after = model.Parameters();
  for (std::size_t p = 0; p < after.size(); ++p) {
    // The gradient storage never moves: the host may keep the pointer.
    EXPECT_EQ(after[p].gradient.data, before[p].gradient.data) << after[p].name;
    EXPECT_EQ(after[p].value.data, before[p].value.data) << after[p].name;
    const float* gradient = Floats(after[p].gradient);
    first_gradients.emplace_back(gradient, gradient + Elements(after[p].gradient));
    double norm = 0;
    for (float value : first_gradients.back()) norm += std::abs(value);
    EXPECT_GT(norm, 0.0) << after[p].name << " got no gradient";
  }
  // A second step without zeroing ADDS: the gradient doubles (dropout is off).
  EXPECT_FLOAT_EQ(TrainStep(model, batch), loss);
  for (std::size_t p = 0; p < after.size(); ++p) {
    const float* gradient = Floats(after[p].gradient);
    for (std::size_t i = 0; i < first_gradients[p].size(); i += 97) {
      ASSERT_NEAR(gradient[i], 2 * first_gradients[p][i], 1e-6 + 1e-5 * std::abs(gradient[i]))
          << after[p].name << "[" << i << "]";
    }
  }
  // Note [Replaced gradients]: zero_gradients writes nothing, the next step's gradients replace
  // the doubled ones, in the same memory.
  EXPECT_NE(model.Info().flags & DPL_MODEL_REPLACED_GRADIENTS, 0u);
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  EXPECT_FLOAT_EQ(TrainStep(model, batch), loss);
  const auto replaced = model.Parameters();
  for (std::size_t p = 0; p < replaced.size(); ++p) {
    ExpectSameMemoryHolding(replaced[p].gradient, before[p].gradient, first_gradients[p],
                            replaced[p].name);
  }
}

// share_gradients (model ABI v4): the gradients move into the host's memory, values and all, and
// backward accumulates and replaces them there.
TEST(ConvNet, ShareGradientsMovesTheGradientsIntoTheHostsMemory) {
  Model shared("convnet", "dropout=0"), own("convnet", "dropout=0");
  const Batch batch(8);
  TrainStep(shared, batch);
  TrainStep(own, batch);
  const uint64_t total = shared.ParameterElements();
  std::vector<float> host(total, -1.0f);
  EXPECT_EQ(shared.plugin().share_gradients(shared.get(), host.data(), total - 1),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(shared.plugin().last_error()).find("floats, the parameters"),
            std::string::npos)
      << shared.plugin().last_error();
  ASSERT_EQ(shared.plugin().share_gradients(shared.get(), host.data(), total), DPL_OK)
      << shared.plugin().last_error();
  EXPECT_TRUE(host == own.Values(DPL_MODEL_TENSORS_GRADIENTS)) << "the values moved with them";
  size_t offset = 0;
  for (const auto& parameter : shared.Parameters()) {
    EXPECT_EQ(Floats(parameter.gradient), host.data() + offset) << parameter.name;
    offset += size_t(Elements(parameter.gradient));
  }
  TrainStep(shared, batch);  // adds, in the host's memory
  TrainStep(own, batch);
  EXPECT_TRUE(host == own.Values(DPL_MODEL_TENSORS_GRADIENTS));
  ASSERT_EQ(shared.plugin().zero_gradients(shared.get()), DPL_OK);
  ASSERT_EQ(own.plugin().zero_gradients(own.get()), DPL_OK);
  TrainStep(shared, batch);  // replaces, in the host's memory
  TrainStep(own, batch);
  EXPECT_TRUE(host == own.Values(DPL_MODEL_TENSORS_GRADIENTS));
}

// The optimizer's state views the tensors as they are: neither moves into host memory after it.
TEST(ConvNet, SharingEntriesAreRefusedOnceTheOptimizerIsSet) {
  Model model("convnet", "");
  const uint64_t total = model.ParameterElements();
  const dpl_optimizer_config_v4 config = OptimizerConfig(
      DPL_OPTIMIZER_SGD, std::vector<double>(model.Parameters().size(), 0.0), total);
  ASSERT_EQ(model.plugin().set_optimizer(model.get(), &config), DPL_OK)
      << model.plugin().last_error();
  std::vector<float> host(total);
  EXPECT_EQ(model.plugin().share_parameters(model.get(), host.data(), total), DPL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(model.plugin().last_error()).find("share_parameters takes host memory"),
            std::string::npos)
      << model.plugin().last_error();
  EXPECT_EQ(model.plugin().share_gradients(model.get(), host.data(), total), DPL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(model.plugin().last_error()).find("with an optimizer"), std::string::npos)
      << model.plugin().last_error();
}

TEST(ConvNet, PlainSgdOnTheExposedTensorsLowersTheLoss) {
  Model model("convnet", "dropout=0", 3);
  const Batch batch(16);
  const float first = TrainStep(model, batch);
  float last = first;
  for (int step = 0; step < 5; ++step) {
    Sgd(model, 0.05f);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    last = TrainStep(model, batch);
  }
  EXPECT_LT(last, 0.9f * first) << "first " << first << " last " << last;
}

std::atomic<int> g_ready_calls[16];

void CountReady(void* context, uint32_t index) {
  *static_cast<std::atomic<int>*>(context) += 1;
  if (index < 16) g_ready_calls[index] += 1;
}

TEST(ConvNet, GradientReadyCallbackFiresOncePerParameterPerStep) {
  Model model("convnet", "");
  const Batch batch(4);
  std::atomic<int> total{0};
  for (auto& count : g_ready_calls) count = 0;
  ASSERT_EQ(model.plugin().set_gradient_ready_callback(model.get(), &CountReady, &total), DPL_OK);
  TrainStep(model, batch);
  TrainStep(model, batch);
  EXPECT_EQ(total.load(), 16);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(g_ready_calls[i].load(), 2) << "parameter " << i;
  ASSERT_EQ(model.plugin().set_gradient_ready_callback(model.get(), nullptr, nullptr), DPL_OK);
  TrainStep(model, batch);
  EXPECT_EQ(total.load(), 16) << "a removed callback must not fire";
}

TEST(ConvNet, SaveAndLoadRoundTripIntoTheSameTensors) {
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/convnet_state.pt";
  Model model("convnet", "", 11);
  const auto parameters = model.Parameters();
  std::vector<std::vector<float>> saved;
  for (const auto& parameter : parameters) {
    saved.emplace_back(Floats(parameter.value),
                       Floats(parameter.value) + Elements(parameter.value));
  }
  ASSERT_EQ(model.plugin().save_state(model.get(), path.c_str()), DPL_OK)
      << model.plugin().last_error();
  for (const auto& parameter : parameters) {
    for (int64_t i = 0; i < Elements(parameter.value); ++i) Floats(parameter.value)[i] = 0.5f;
  }
  ASSERT_EQ(model.plugin().load_state(model.get(), path.c_str()), DPL_OK)
      << model.plugin().last_error();
  const auto reloaded = model.Parameters();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    ExpectSameMemoryHolding(reloaded[p].value, parameters[p].value, saved[p], parameters[p].name);
  }
  // Another seed gives other weights; loading the file makes them equal again.
  Model other("convnet", "", 12);
  EXPECT_NE(Floats(other.Parameter(0).value)[0], saved[0][0]);
  ASSERT_EQ(other.plugin().load_state(other.get(), path.c_str()), DPL_OK);
  EXPECT_EQ(Floats(other.Parameter(0).value)[0], saved[0][0]);

  const std::string missing = std::string(DPL_TEST_BINARY_DIR) + "/no_such_state.pt";
  EXPECT_EQ(model.plugin().load_state(model.get(), missing.c_str()), DPL_ERR_IO);
  EXPECT_EQ(std::string(model.plugin().last_error())
                .rfind("model \"convnet\": state file " + missing + " cannot be read: ", 0),
            0u)
      << model.plugin().last_error();

  // A state dict of another model lacks this model's tensors: the first missing one is named.
  const std::string mlp_path = std::string(DPL_TEST_BINARY_DIR) + "/mlp_state.pt";
  Model mlp("mlp", "");
  ASSERT_EQ(mlp.plugin().save_state(mlp.get(), mlp_path.c_str()), DPL_OK);
  EXPECT_EQ(model.plugin().load_state(model.get(), mlp_path.c_str()), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.plugin().last_error()),
            "model \"convnet\": state file " + mlp_path + " has no tensor \"cn1.weight\"");
}

dpl_status CreateStatus(const std::string& name, const dpl_model_config_v4& config,
                        std::string* message) {
  return dpl_test::CreateStatus(Plugin(name), config, message);
}

TEST(ConvNet, BadOptionsAreRefusedWithTheirExactError) {
  std::string message;
  EXPECT_EQ(CreateStatus("convnet", Config("dropout=0,colour=blue"), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": unknown option \"colour\" in --model-options; known options: "
            "dropout, broadcast_buffers");
  EXPECT_EQ(CreateStatus("convnet", Config("dropout=maybe"), &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": option \"dropout\" expects 0, 1, true or false, got \"maybe\"");
  EXPECT_EQ(CreateStatus("convnet", Config("dropout"), &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"convnet\": --model-options entry \"dropout\" is not key=value");
  EXPECT_EQ(CreateStatus("convnet", Config("dropout=0,dropout=1"), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"convnet\": option \"dropout\" is given twice in --model-options");
  EXPECT_EQ(CreateStatus("mlp", Config("hidden=wide"), &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"mlp\": option \"hidden\" expects an integer, got \"wide\"");
  EXPECT_EQ(CreateStatus("mlp", Config("dropout=1"), &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"mlp\": unknown option \"dropout\" in --model-options; known options: hidden, "
            "broadcast_buffers");

  dpl_model_config_v4 cuda = Config("");
  cuda.device_type = kDLCUDA;
  EXPECT_EQ(CreateStatus("convnet", cuda, &message), DPL_ERR_NO_DEVICE);
  // No GPU here: the plugin says why (no CUDA in its libtorch, or no device) instead of failing
  // inside libtorch.
  EXPECT_EQ(message, std::string("model \"convnet\": ") + dpl::testing::NoCudaDeviceMessage());
  dpl_model_config_v4 no_threads = Config("");
  no_threads.num_threads = 0;
  EXPECT_EQ(CreateStatus("convnet", no_threads, &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"convnet\": num_threads must be >= 1, got 0");
  dpl_model_config_v4 old_host = Config("");
  old_host.struct_size = 8;
  EXPECT_EQ(CreateStatus("convnet", old_host, &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"convnet\": config struct_size 8 is smaller than " +
                         std::to_string(sizeof(dpl_model_config_v1)) +
                         " (dpl_model_config_v1); rebuild the host against this SDK");
}

TEST(ConvNet, BadBatchesAndIndicesAreRefused) {
  Model model("convnet", "");
  Batch batch(2);
  float loss = 0;
  batch.image_shape[2] = 27;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.plugin().last_error()),
            "model \"convnet\": input must be a float32 tensor of shape (batch, 1, 28, 28) with "
            "batch >= 1; got (2, 1, 27, 28) of dtype code 2 bits 32");
  batch.image_shape[2] = 28;
  batch.label_shape[0] = 3;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.plugin().last_error()),
            "model \"convnet\": labels must be an int64 tensor of shape (2); got (3) of dtype "
            "code 0 bits 64");
  batch.label_shape[0] = 2;
  batch.labels[1] = 10;
  EXPECT_EQ(model.plugin().train_step(model.get(), &batch.input, &batch.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(model.plugin().last_error()).find("model \"convnet\": train_step: "),
            std::string::npos)
      << model.plugin().last_error();
  dpl_parameter_v2 parameter{};
  parameter.struct_size = sizeof parameter;
  EXPECT_EQ(model.plugin().parameter(model.get(), 8, &parameter), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.plugin().last_error()),
            "model \"convnet\": parameter index 8 is out of range; the model has 8 parameters");
  // A success clears the thread's message.
  EXPECT_EQ(model.plugin().parameter(model.get(), 0, &parameter), DPL_OK);
  EXPECT_STREQ(model.plugin().last_error(), "");
}

TEST(ConvNet, EvalStepSumsTheLossCountsHitsAndRestoresTrainMode) {
  Model model("convnet", "", 5);  // dropout on
  const Batch batch(32);
  double loss_sum = 0;
  int64_t correct = -1;
  ASSERT_EQ(EvalStepInto(model, batch.input, batch.target, &loss_sum, &correct), DPL_OK)
      << model.plugin().last_error();
  EXPECT_GE(correct, 0);
  EXPECT_LE(correct, 32);
  // In eval mode train_step's mean loss has no dropout: it is the eval sum over the batch size.
  ASSERT_EQ(model.plugin().set_mode(model.get(), DPL_MODEL_MODE_EVAL), DPL_OK);
  const float eval_mean = TrainStep(model, batch);
  EXPECT_NEAR(loss_sum / 32, eval_mean, 1e-5);
  EXPECT_FLOAT_EQ(TrainStep(model, batch), eval_mean) << "eval mode must be deterministic";
  // Back in train mode dropout draws differ per step; eval_step must not leave eval mode on.
  ASSERT_EQ(model.plugin().set_mode(model.get(), DPL_MODEL_MODE_TRAIN), DPL_OK);
  ASSERT_EQ(EvalStepInto(model, batch.input, batch.target, &loss_sum, &correct), DPL_OK);
  EXPECT_NE(TrainStep(model, batch), TrainStep(model, batch));
}

TEST(Mlp, IsADifferentNetworkBehindTheSameAbi) {
  Model model("mlp", "hidden=32");
  const dpl_model_info_v4 info = model.Info();
  EXPECT_EQ(info.num_classes, 10);
  ASSERT_EQ(info.parameter_count, 4u);
  int64_t elements = 0;
  for (const auto& parameter : model.Parameters()) elements += Elements(parameter.value);
  EXPECT_EQ(elements, 784 * 32 + 32 + 32 * 10 + 10);
  EXPECT_EQ(Elements(Model("mlp", "").Parameter(0).value), 784 * 128);

  // Plain SGD overfits a small batch until eval_step counts every sample as correct.
  const Batch batch(8);
  double initial_loss_sum = 0;
  int64_t correct = 0;
  ASSERT_EQ(EvalStepInto(model, batch.input, batch.target, &initial_loss_sum, &correct), DPL_OK);
  double loss_sum = initial_loss_sum;
  for (int step = 0; step < 200 && correct < 8; ++step) {
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    TrainStep(model, batch);
    Sgd(model, 0.1f);
    ASSERT_EQ(EvalStepInto(model, batch.input, batch.target, &loss_sum, &correct), DPL_OK);
  }
  EXPECT_EQ(correct, 8);
  EXPECT_LT(loss_sum, initial_loss_sum);
}

// Each plugin exports its entry table and nothing else.
TEST(Plugins, ExportOnlyTheEntrySymbol) {
  for (const std::string name : {"convnet", "mlp", "torchscript"}) {
    const std::string path = std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_model_" + name + ".so";
    int exit_code = -1;
    const std::string output = Capture("nm -D --defined-only " + path, &exit_code);
    ASSERT_EQ(exit_code, 0) << output;
    std::set<std::string> symbols;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) {
      const auto last_space = line.find_last_of(' ');
      if (last_space != std::string::npos) symbols.insert(line.substr(last_space + 1));
    }
    EXPECT_EQ(symbols, std::set<std::string>{"dpl_model_plugin_v4"}) << path << ":\n" << output;
  }
}

}  // namespace
