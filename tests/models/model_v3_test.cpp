// Model ABI v3 of the SDK's libtorch helper, through the C ABI: the data at create, buffers,
// random state, two host batch slots, state files for and from Python torch (precision:
// precision_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dpl/model.h"
#include "plugin_driver.hpp"

namespace {

using namespace dpl_test;

std::vector<int64_t> Shape(const DLTensor& tensor) {
  return std::vector<int64_t>(tensor.shape, tensor.shape + tensor.ndim);
}

std::string Path(const std::string& name) {
  return std::string(DPL_TEST_BINARY_DIR) + "/" + name;
}

TEST(ModelAbiV3, ConvNetTakesTheRecipeDataAndRefusesOtherData) {
  std::string message;
  EXPECT_EQ(CreateStatus(Plugin("convnet"), WithData(Config(""), {3, 32, 32}, 10), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": the data has samples of shape (3, 32, 32) and 10 classes; this "
            "model takes shape (1, 28, 28) and 10 classes; train it on data of that shape, or "
            "train a model that takes this data");
  EXPECT_EQ(CreateStatus(Plugin("convnet"), WithData(Config(""), {1, 28, 28}, 5), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": the data has samples of shape (1, 28, 28) and 5 classes; this "
            "model takes shape (1, 28, 28) and 10 classes; train it on data of that shape, or "
            "train a model that takes this data");
  dpl_model_config_v4 bad = WithData(Config(""), {1, 0, 28}, 10);
  EXPECT_EQ(CreateStatus(Plugin("convnet"), bad, &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message, "model \"convnet\": config input_shape (1, 0, 28) has an extent below 1");
  bad.input_ndim = 9;
  EXPECT_EQ(CreateStatus(Plugin("convnet"), bad, &message), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": config input_ndim 9 is more than DPL_MODEL_MAX_INPUT_DIMS (8)");

  // A host that does not know the data (input_ndim 0, num_classes 0), and a v1-sized config,
  // get the model's own shape.
  for (const uint32_t size :
       {uint32_t(sizeof(dpl_model_config_v4)), uint32_t(sizeof(dpl_model_config_v3)),
        uint32_t(sizeof(dpl_model_config_v1))}) {
    dpl_model_config_v4 unknown = WithData(Config(""), {}, 0);
    unknown.struct_size = size;
    const Model model(Plugin("convnet"), unknown);
    const dpl_model_info_v4 info = model.Info();
    ASSERT_EQ(info.input_ndim, 3u);
    EXPECT_EQ(info.input_shape[1], 28);
    EXPECT_EQ(info.num_classes, 10);
  }
}

TEST(ModelAbiV3, DescribeFillsTheV3FieldsOnlyForAV3SizedInfo) {
  const Model model("convnet", "");
  const dpl_model_info_v4 info = model.Info();
  EXPECT_EQ(info.buffer_count, 0u);
  EXPECT_EQ(info.flags, DPL_MODEL_BROADCAST_BUFFERS | DPL_MODEL_DEVICE_OPTIMIZER |
                            DPL_MODEL_REPLACED_GRADIENTS);
  EXPECT_EQ(info.stream, nullptr);  // a CPU model
  dpl_model_info_v4 v3_sized{};     // a v3 host: no optimizer on the model's device
  v3_sized.struct_size = sizeof(dpl_model_info_v3);
  ASSERT_EQ(model.plugin().describe(model.get(), &v3_sized), DPL_OK) << model.error();
  EXPECT_EQ(v3_sized.flags, DPL_MODEL_BROADCAST_BUFFERS);
  dpl_model_info_v4 v1_sized{};
  v1_sized.struct_size = sizeof(dpl_model_info_v1);
  v1_sized.buffer_count = 77;
  v1_sized.flags = 99;
  ASSERT_EQ(model.plugin().describe(model.get(), &v1_sized), DPL_OK) << model.error();
  EXPECT_EQ(v1_sized.parameter_count, 8u);
  EXPECT_EQ(v1_sized.buffer_count, 77u) << "a v1-sized info must not be written past its size";
  EXPECT_EQ(v1_sized.flags, 99u);
}

// Note [Replaced gradients] of the SDK: a host that created the model with an older config reads
// zeros through the gradients' addresses after zero_gradients, as its ABI promised.
TEST(ModelAbiV3, AnOlderHostReadsZeroGradientsAfterZeroGradients) {
  dpl_model_config_v4 config = Config("dropout=0");
  config.struct_size = sizeof(dpl_model_config_v3);
  const Model model(Plugin("convnet"), config);
  EXPECT_EQ(model.Info().flags & DPL_MODEL_REPLACED_GRADIENTS, 0u);
  const Batch batch(4);
  TrainStep(model, batch);
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  for (const auto& parameter : model.Parameters()) {
    for (int64_t i = 0; i < Elements(parameter.gradient); ++i) {
      ASSERT_EQ(Floats(parameter.gradient)[i], 0.0f) << parameter.name;
    }
  }
}

TEST(Mlp, TakesAnySampleShapeAndNumberOfClasses) {
  const Model model(Plugin("mlp"), WithData(Config("hidden=16"), {3, 8, 8}, 5));
  const dpl_model_info_v4 info = model.Info();
  ASSERT_EQ(info.input_ndim, 3u);
  EXPECT_EQ(std::vector<int64_t>(info.input_shape, info.input_shape + 3),
            (std::vector<int64_t>{3, 8, 8}));
  EXPECT_EQ(info.num_classes, 5);
  const auto parameters = model.Parameters();
  ASSERT_EQ(parameters.size(), 4u);
  EXPECT_EQ(Shape(parameters[0].value), (std::vector<int64_t>{16, 3 * 8 * 8}));
  EXPECT_EQ(Shape(parameters[2].value), (std::vector<int64_t>{5, 16}));
  const Batch batch(8, 3, {3, 8, 8}, 5);
  const float first = TrainStep(model, batch);
  for (int step = 0; step < 20; ++step) {
    Sgd(model, 0.1f);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    TrainStep(model, batch);
  }
  EXPECT_LT(TrainStep(model, batch), 0.5f * first);
  const Batch images(2);
  float loss = 0;
  EXPECT_EQ(model.plugin().train_step(model.get(), &images.input, &images.target, &loss),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.error(),
               "model \"mlp\": input must be a float32 tensor of shape (batch, 3, 8, 8) with "
               "batch >= 1; got (2, 1, 28, 28) of dtype code 2 bits 32");
}

TEST(BatchNorm, ListsItsBuffersAndFrozenParametersWithFixedAddresses) {
  const Model model(TestPlugin("batchnorm"), Config(""));
  const dpl_model_info_v4 info = model.Info();
  EXPECT_EQ(info.parameter_count, 6u);  // conv, bn, fc weights and biases; not the frozen scale
  ASSERT_EQ(info.buffer_count, 4u);
  EXPECT_EQ(BufferFlags(info), DPL_MODEL_BROADCAST_BUFFERS);
  const auto buffers = model.Buffers();
  const std::vector<std::string> names = {"scale", "bn.running_mean", "bn.running_var",
                                          "bn.num_batches_tracked"};
  for (size_t i = 0; i < buffers.size(); ++i) EXPECT_EQ(buffers[i].name, names[i]);
  EXPECT_EQ(Shape(buffers[1].value), (std::vector<int64_t>{4}));
  EXPECT_EQ(buffers[1].value.dtype.code, kDLFloat);
  EXPECT_EQ(buffers[1].value.dtype.bits, 32);
  EXPECT_EQ(buffers[3].value.ndim, 0);
  EXPECT_EQ(buffers[3].value.dtype.code, kDLInt);
  EXPECT_EQ(buffers[3].value.dtype.bits, 64);
  EXPECT_EQ(Floats(buffers[0].value)[0], 2.0f);
  EXPECT_EQ(Floats(buffers[2].value)[0], 1.0f);  // running_var starts at 1

  const Batch batch(8);
  TrainStep(model, batch);
  TrainStep(model, batch);
  const auto after = model.Buffers();
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(after[i].value.data, buffers[i].value.data) << names[i];
  }
  EXPECT_EQ(*static_cast<const int64_t*>(after[3].value.data), 2);
  EXPECT_NE(Floats(after[1].value)[0], 0.0f) << "train steps update the running mean in place";
  const float mean = Floats(after[1].value)[0];
  EvalStep(model, batch);
  EXPECT_EQ(Floats(after[1].value)[0], mean) << "eval_step must not update the statistics";
  EXPECT_EQ(*static_cast<const int64_t*>(after[3].value.data), 2);

  dpl_buffer_v3 buffer{};
  buffer.struct_size = sizeof buffer;
  EXPECT_EQ(model.plugin().buffer(model.get(), 4, &buffer), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.error(),
               "model \"batchnorm\": buffer index 4 is out of range; the model has 4 buffers");
  buffer.struct_size = 4;
  EXPECT_EQ(model.plugin().buffer(model.get(), 0, &buffer), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.error()),
            "model \"batchnorm\": buffer struct_size 4 is smaller than " +
                std::to_string(sizeof(dpl_buffer_v3)));
}

TEST(BatchNorm, ReadAndWriteBuffersMoveEveryByteInIndexOrder) {
  const Model model(TestPlugin("batchnorm"), Config("", 4));
  const Batch batch(8);
  TrainStep(model, batch);
  const auto buffers = model.Buffers();
  const uint64_t total = 4 + 16 + 16 + 8;
  std::vector<uint8_t> bytes(total);
  ASSERT_EQ(model.plugin().read_buffers(model.get(), bytes.data(), total), DPL_OK) << model.error();
  uint64_t offset = 0;
  for (const auto& buffer : buffers) {
    const size_t size = size_t(Elements(buffer.value)) * buffer.value.dtype.bits / 8;
    EXPECT_EQ(std::memcmp(bytes.data() + offset, buffer.value.data, size), 0) << buffer.name;
    offset += size;
  }
  ASSERT_EQ(offset, total);

  // Another instance takes them over: the same statistics give the same evaluation.
  const Model other(TestPlugin("batchnorm"), Config("", 4));
  const Evaluation before = EvalStep(other, batch);
  ASSERT_EQ(other.plugin().write_buffers(other.get(), bytes.data(), total), DPL_OK)
      << other.error();
  EXPECT_EQ(*static_cast<const int64_t*>(other.Buffer(3).value.data), 1);
  const Evaluation taken_over = EvalStep(other, batch);
  EXPECT_NE(taken_over.loss_sum, before.loss_sum);
  EXPECT_EQ(taken_over.loss_sum, EvalStep(model, batch).loss_sum);

  EXPECT_EQ(model.plugin().read_buffers(model.get(), bytes.data(), total - 1),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.error(),
               "model \"batchnorm\": the host buffer holds 43 bytes, the buffers 44");
  EXPECT_EQ(model.plugin().write_buffers(model.get(), bytes.data(), total + 1),
            DPL_ERR_INVALID_ARGUMENT);
}

TEST(BatchNorm, SaveAndLoadStateCarryTheBuffers) {
  const Model model(TestPlugin("batchnorm"), Config("", 4)),
      other(TestPlugin("batchnorm"), Config("", 5));
  TrainStep(model, Batch(8));
  TrainStep(model, Batch(8, 9));
  const std::string path = Path("batchnorm_state.pt");
  ASSERT_EQ(model.plugin().save_state(model.get(), path.c_str()), DPL_OK) << model.error();
  ASSERT_EQ(other.plugin().load_state(other.get(), path.c_str()), DPL_OK) << other.error();
  EXPECT_EQ(other.Values(), model.Values());
  std::vector<uint8_t> saved(44), loaded(44);
  ASSERT_EQ(model.plugin().read_buffers(model.get(), saved.data(), saved.size()), DPL_OK);
  ASSERT_EQ(other.plugin().read_buffers(other.get(), loaded.data(), loaded.size()), DPL_OK);
  EXPECT_EQ(loaded, saved) << "statistics, the int64 counter and the frozen scale";
  EXPECT_EQ(*static_cast<const int64_t*>(other.Buffer(3).value.data), 2);
}

TEST(BatchNorm, TheBroadcastBuffersOptionSharesTheModelOptions) {
  const Model quiet(TestPlugin("batchnorm"), Config("broadcast_buffers=0"));
  EXPECT_EQ(BufferFlags(quiet.Info()), 0u);
  const Model off(TestPlugin("batchnorm"), Config("broadcast_buffers=false"));
  EXPECT_EQ(BufferFlags(off.Info()), 0u);
  const Model on(TestPlugin("batchnorm"), Config("broadcast_buffers=true"));
  EXPECT_EQ(BufferFlags(on.Info()), uint32_t(DPL_MODEL_BROADCAST_BUFFERS));
  std::string message;
  EXPECT_EQ(CreateStatus(TestPlugin("batchnorm"), Config("broadcast_buffers=maybe"), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"batchnorm\": option \"broadcast_buffers\" expects 0, 1, true or false, got "
            "\"maybe\"");
  EXPECT_EQ(CreateStatus(TestPlugin("batchnorm"), Config("momentum=0.1"), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"batchnorm\": unknown option \"momentum\" in --model-options; known options: "
            "broadcast_buffers");
}

TEST(ConvNet, RngStateRoundTripRepeatsDropoutExactly) {
  const Model model("convnet", "", 5);  // dropout on
  const Batch batch(8);
  const std::vector<uint8_t> state = model.RngState();
  const float first = TrainStep(model, batch);
  const std::vector<float> first_gradients = [&] {
    std::vector<float> gradients(300426);
    EXPECT_EQ(model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS,
                                          gradients.data(), gradients.size()),
              DPL_OK);
    return gradients;
  }();
  const float second = TrainStep(model, batch);
  EXPECT_NE(first, second) << "dropout draws differ from step to step";

  ASSERT_EQ(model.plugin().set_rng_state(model.get(), state.data(), state.size()), DPL_OK)
      << model.error();
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  EXPECT_EQ(TrainStep(model, batch), first);
  std::vector<float> gradients(first_gradients.size());
  ASSERT_EQ(model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS, gradients.data(),
                                        gradients.size()),
            DPL_OK);
  EXPECT_EQ(gradients, first_gradients) << "the same dropout masks give the same gradients";
  EXPECT_EQ(TrainStep(model, batch), second);

  // Too small a buffer says the size; other bytes are refused and change nothing.
  uint64_t size = 0;
  std::vector<uint8_t> small(8);
  EXPECT_EQ(model.plugin().rng_state(model.get(), small.data(), small.size(), &size),
            DPL_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(size, state.size());
  EXPECT_EQ(std::string(model.error()), "model \"convnet\": the rng state needs " +
                                            std::to_string(state.size()) +
                                            " bytes, the buffer holds 8");
  std::vector<uint8_t> other = state;
  other[0] = 'X';
  EXPECT_EQ(model.plugin().set_rng_state(model.get(), other.data(), other.size()),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.error()), "model \"convnet\": rng state of " +
                                            std::to_string(state.size()) +
                                            " bytes was not written by a dpl torch model's "
                                            "rng_state");
  EXPECT_EQ(model.plugin().set_rng_state(model.get(), state.data(), state.size() - 1),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(model.error()), "model \"convnet\": rng state of " +
                                            std::to_string(state.size() - 1) +
                                            " bytes is truncated; pass the bytes rng_state wrote");
}

TEST(ConvNet, TwoHostBatchSlotsAreIndependent) {
  const Model model("convnet", "dropout=0", 3), reference("convnet", "dropout=0", 3);
  DLTensor input0{}, labels0{}, input1{}, labels1{}, plain_input{}, plain_labels{};
  ASSERT_EQ(model.plugin().host_batch_slot(model.get(), 0, 16, &input0, &labels0), DPL_OK)
      << model.error();
  ASSERT_EQ(model.plugin().host_batch_slot(model.get(), 1, 16, &input1, &labels1), DPL_OK);
  ASSERT_EQ(model.plugin().host_batch(model.get(), 16, &plain_input, &plain_labels), DPL_OK);
  EXPECT_EQ(plain_input.data, input0.data) << "host_batch is slot 0";
  EXPECT_NE(input0.data, input1.data);
  EXPECT_NE(labels0.data, labels1.data);

  const Batch first(16, 1), second(16, 2);
  std::copy(first.images.begin(), first.images.end(), Floats(input0));
  std::copy(first.labels.begin(), first.labels.end(), static_cast<int64_t*>(labels0.data));
  std::copy(second.images.begin(), second.images.end(), Floats(input1));
  std::copy(second.labels.begin(), second.labels.end(), static_cast<int64_t*>(labels1.data));
  // A new capacity for slot 1 leaves slot 0's memory and contents alone.
  DLTensor input1b{}, labels1b{};
  ASSERT_EQ(model.plugin().host_batch_slot(model.get(), 1, 16, &input1b, &labels1b), DPL_OK);
  EXPECT_EQ(input1b.data, input1.data) << "the same capacity keeps the slot's memory";
  float loss0 = NAN, loss1 = NAN;
  ASSERT_EQ(model.plugin().train_step(model.get(), &input0, &labels0, &loss0), DPL_OK)
      << model.error();
  ASSERT_EQ(model.plugin().train_step(model.get(), &input1, &labels1, &loss1), DPL_OK);
  EXPECT_EQ(loss0, TrainStep(reference, first));
  EXPECT_EQ(loss1, TrainStep(reference, second));
  DLTensor input1c{}, labels1c{};
  ASSERT_EQ(model.plugin().host_batch_slot(model.get(), 1, 4, &input1c, &labels1c), DPL_OK);
  EXPECT_EQ(input1c.shape[0], 4);
  EXPECT_EQ(std::memcmp(input0.data, first.images.data(), first.images.size() * sizeof(float)), 0);
  ASSERT_EQ(model.plugin().train_step(model.get(), &input0, &labels0, &loss0), DPL_OK);
  EXPECT_EQ(loss0, TrainStep(reference, first));

  EXPECT_EQ(model.plugin().host_batch_slot(model.get(), 2, 16, &input0, &labels0),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.error(),
               "model \"convnet\": host batch slot 2 does not exist; the slots are 0 to 1");
}

TEST(ConvNet, SaveStateIsAStateDictPythonLoadsIntoTheRecipeConvNet) {
  if (!PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const Batch batch = Batch::FromFile(FixtureDir() + "/batch.bin");
  const Model model("convnet", "", 11);
  const std::string path = Path("convnet_saved_state.pt");
  ASSERT_EQ(model.plugin().save_state(model.get(), path.c_str()), DPL_OK) << model.error();
  const Evaluation plugin = EvalStep(model, batch);
  const std::string line =
      ResultLine(RunFixtures("state " + path + " " + FixtureDir() + "/batch.bin"));
  EXPECT_EQ(Field(line, "keys"),
            "cn1.weight,cn1.bias,cn2.weight,cn2.bias,fc1.weight,fc1.bias,fc2.weight,fc2.bias")
      << line;
  ASSERT_FALSE(Field(line, "loss_sum").empty()) << line;
  EXPECT_NEAR(std::stod(Field(line, "loss_sum")), plugin.loss_sum, 1e-4);
  EXPECT_EQ(std::stoll(Field(line, "correct")), plugin.correct);

  // The plugin reads its own file back into the same tensors.
  const Model other("convnet", "", 12);
  ASSERT_EQ(other.plugin().load_state(other.get(), path.c_str()), DPL_OK) << other.error();
  EXPECT_EQ(other.Values(), model.Values());
}

TEST(ConvNet, LoadStateReadsAStateDictPythonWrote) {
  if (!PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const Batch batch = Batch::FromFile(FixtureDir() + "/batch.bin");
  std::ifstream expected_file(FixtureDir() + "/convnet_python_eval.txt");
  std::string expected;
  std::getline(expected_file, expected);
  const Model model("convnet", "", 0);
  const std::string path = FixtureDir() + "/convnet_python_state.pt";
  ASSERT_EQ(model.plugin().load_state(model.get(), path.c_str()), DPL_OK) << model.error();
  const Evaluation plugin = EvalStep(model, batch);
  EXPECT_NEAR(plugin.loss_sum, std::stod(Field(expected, "loss_sum")), 1e-4);
  EXPECT_EQ(plugin.correct, std::stoll(Field(expected, "correct")));
}

TEST(ConvNet, LoadStateRefusesWhatIsNoStateDictOfThisModel) {
  if (!PythonHasTorch())
    GTEST_SKIP() << DPL_TEST_PYTHON " cannot import torch (run tools/setup.sh)";
  const Model model("convnet", "");
  auto refusal = [&](const std::string& path) {
    EXPECT_EQ(model.plugin().load_state(model.get(), path.c_str()), DPL_ERR_INVALID_ARGUMENT);
    return std::string(model.error());
  };
  const std::string garbage = FixtureDir() + "/not_an_archive.pt";
  EXPECT_EQ(refusal(garbage), "model \"convnet\": state file " + garbage +
                                  " is not a zip archive as torch.save and torch.jit.save write "
                                  "them (the legacy format of torch.save(..., "
                                  "_use_new_zipfile_serialization=False) is not read)");
  const std::string checkpoint = FixtureDir() + "/checkpoint_dict.pt";
  EXPECT_EQ(refusal(checkpoint), "model \"convnet\": state file " + checkpoint +
                                     " holds a dict whose entry \"model\" is a dict, not a "
                                     "tensor; save module.state_dict() itself");
  // A TorchScript module's parameters and buffers count as a state dict: the recipe's scripted
  // ConvNet has the same names.
  const std::string scripted = FixtureDir() + "/convnet_scripted.pt";
  ASSERT_EQ(model.plugin().load_state(model.get(), scripted.c_str()), DPL_OK) << model.error();
  const std::string cnn = FixtureDir() + "/cnn_scripted.pt";
  EXPECT_EQ(refusal(cnn), "model \"convnet\": state file " + cnn + " has no tensor \"cn1.weight\"");

  const Model narrow("mlp", "hidden=32"), wide("mlp", "");
  const std::string mlp_path = Path("mlp_hidden32.pt");
  ASSERT_EQ(narrow.plugin().save_state(narrow.get(), mlp_path.c_str()), DPL_OK);
  EXPECT_EQ(wide.plugin().load_state(wide.get(), mlp_path.c_str()), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(wide.error()), "model \"mlp\": state file " + mlp_path +
                                           ": tensor \"fc1.weight\" has shape [32, 784], the "
                                           "model expects [128, 784]");
}

// The same module built for model ABI v2 exports the v2 table and keeps the v2 archive, which v3
// builds of it still read (an older run's checkpoint); other models refuse it by name.
TEST(BatchNorm, TheV2BuildKeepsItsTableAndItsArchive) {
  const auto& v2 = *static_cast<const dpl_model_plugin_v2*>(
      LoadTable(std::string(DPL_TEST_MODEL_DIR) + "/libdpl_test_model_batchnorm_v2.so",
                "dpl_model_plugin_v2"));
  EXPECT_EQ(v2.header.abi_version, DPL_MODEL_ABI_VERSION_2);
  EXPECT_EQ(v2.header.struct_size, sizeof(dpl_model_plugin_v2));
  dpl_model_config_v1 config{};
  config.struct_size = sizeof config;
  config.version = DPL_MODEL_ABI_VERSION_2;
  config.options = "";
  config.device_type = kDLCPU;
  config.seed = 9;
  config.num_threads = 1;
  dpl_model* old_model = nullptr;
  ASSERT_EQ(v2.create(&config, &old_model), DPL_OK) << v2.last_error();
  const std::string path = Path("batchnorm_v2_archive.pt");
  ASSERT_EQ(v2.save_state(old_model, path.c_str()), DPL_OK) << v2.last_error();
  dpl_model_info_v1 info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(v2.describe(old_model, &info), DPL_OK);
  EXPECT_EQ(info.parameter_count, 6u);
  config.options = "broadcast_buffers=1";  // no buffers in v2: not an option there
  dpl_model* refused = nullptr;
  EXPECT_EQ(v2.create(&config, &refused), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(v2.last_error(),
               "model \"batchnorm\": unknown option \"broadcast_buffers\" in --model-options; "
               "known options: (none)");

  const Model current(TestPlugin("batchnorm"), Config("", 1));
  ASSERT_EQ(current.plugin().load_state(current.get(), path.c_str()), DPL_OK) << current.error();
  std::vector<float> old_values(current.Values().size());
  ASSERT_EQ(
      v2.read_tensors(old_model, DPL_MODEL_TENSORS_VALUES, old_values.data(), old_values.size()),
      DPL_OK);
  EXPECT_EQ(current.Values(), old_values);
  v2.destroy(old_model);

  const Model convnet("convnet", "");
  EXPECT_EQ(convnet.plugin().load_state(convnet.get(), path.c_str()), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(convnet.error()),
            "model \"convnet\": state file " + path + " was not saved by this model (\"convnet\")");
}

}  // namespace
