// The in-tree ConvNet against Python torch's on the same weights and batch, and the memory it
// hands the host: gradients back to back, host batch buffers, the host copy's reads and writes.
// Loaded with dlopen from the build's plugin folder and driven through the C ABI only.
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

// The reference script's inputs: every parameter's floats back to back, then the batch (its size,
// images, labels).
void WriteReferenceInputs(Model& model, const Batch& batch, const std::string& params_path,
                          const std::string& batch_path) {
  std::ofstream params(params_path, std::ios::binary);
  for (const auto& parameter : model.Parameters()) {
    params.write(static_cast<const char*>(parameter.value.data),
                 static_cast<std::streamsize>(Elements(parameter.value) * sizeof(float)));
  }
  std::ofstream batch_file(batch_path, std::ios::binary);
  const int64_t size = int64_t(batch.labels.size());
  batch_file.write(reinterpret_cast<const char*>(&size), sizeof size);
  batch_file.write(reinterpret_cast<const char*>(batch.images.data()),
                   static_cast<std::streamsize>(batch.images.size() * sizeof(float)));
  batch_file.write(reinterpret_cast<const char*>(batch.labels.data()),
                   static_cast<std::streamsize>(batch.labels.size() * sizeof(int64_t)));
}

// The ConvNet matches Python torch's ConvNet of the recipe on the same weights and batch.
TEST(ConvNet, MatchesPythonTorchOnTheSameWeightsAndBatch) {
  int exit_code = -1;
  Capture(std::string(DPL_TEST_PYTHON) + " -c 'import torch' 2>&1", &exit_code);
  if (exit_code != 0)
    GTEST_SKIP() << DPL_TEST_PYTHON
        " cannot import torch (run tools/setup.sh); reference check skipped";

  Model model("convnet", "dropout=0", 0);
  const Batch batch(16, 21);
  const std::string directory = DPL_TEST_BINARY_DIR;
  const std::string params_path = directory + "/reference_params.bin";
  const std::string batch_path = directory + "/reference_batch.bin";
  const std::string out_path = directory + "/reference_out.bin";
  WriteReferenceInputs(model, batch, params_path, batch_path);
  const std::string script =
      std::string(DPL_TEST_SOURCE_DIR) + "/tests/models/convnet_reference.py";
  const std::string output = Capture(std::string(DPL_TEST_PYTHON) + " " + script + " " +
                                         params_path + " " + batch_path + " " + out_path + " 2>&1",
                                     &exit_code);
  ASSERT_EQ(exit_code, 0) << output;

  const float loss = TrainStep(model, batch);
  double loss_sum = 0;
  int64_t correct = -1;
  ASSERT_EQ(EvalStepInto(model, batch.input, batch.target, &loss_sum, &correct), DPL_OK);

  std::ifstream reference(out_path, std::ios::binary);
  double reference_loss = 0;
  double reference_loss_sum = 0;
  int64_t reference_correct = -1;
  reference.read(reinterpret_cast<char*>(&reference_loss), sizeof reference_loss);
  reference.read(reinterpret_cast<char*>(&reference_loss_sum), sizeof reference_loss_sum);
  reference.read(reinterpret_cast<char*>(&reference_correct), sizeof reference_correct);
  ASSERT_TRUE(reference.good()) << output;
  EXPECT_NEAR(loss, reference_loss, 1e-5);
  EXPECT_NEAR(loss_sum, reference_loss_sum, 16 * 1e-5);
  EXPECT_EQ(correct, reference_correct);
  for (const auto& parameter : model.Parameters()) {
    std::vector<float> expected(static_cast<std::size_t>(Elements(parameter.gradient)));
    reference.read(reinterpret_cast<char*>(expected.data()),
                   static_cast<std::streamsize>(expected.size() * sizeof(float)));
    ASSERT_TRUE(reference.good()) << parameter.name;
    const float* gradient = Floats(parameter.gradient);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_NEAR(gradient[i], expected[i], 1e-5 + 1e-4 * std::abs(expected[i]))
          << parameter.name << "[" << i << "]";
    }
  }
}

// Note [Flat gradients] of the torch helper: the gradients lie back to back in parameter order,
// so the host reduces a bucket in one collective.
TEST(ConvNet, GradientsAreViewsIntoOneBufferInParameterOrder) {
  Model model("convnet", "");
  const std::vector<dpl_parameter_v2> parameters = model.Parameters();
  ASSERT_EQ(parameters.size(), 8u);
  for (size_t i = 0; i + 1 < parameters.size(); ++i) {
    EXPECT_EQ(Floats(parameters[i].gradient) + Elements(parameters[i].gradient),
              Floats(parameters[i + 1].gradient))
        << parameters[i].name;
  }
  // After zero_gradients the model's own readers see zeros before any backward (Note [Replaced
  // gradients]: they settle the pending zero).
  const Batch batch(4);
  TrainStep(model, batch);
  ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
  const std::vector<float> read = model.Values(DPL_MODEL_TENSORS_GRADIENTS);
  for (size_t i = 0; i < read.size(); ++i) ASSERT_EQ(read[i], 0.0f) << "element " << i;
  for (const auto& parameter : parameters) {
    for (int64_t i = 0; i < Elements(parameter.gradient); ++i) {
      ASSERT_EQ(Floats(parameter.gradient)[i], 0.0f) << parameter.name;
    }
  }
}

TEST(ConvNet, HostBatchGivesHostBuffersThatTrainLikeTheCallersOwn) {
  Model own("convnet", "dropout=0", 3), via_buffers("convnet", "dropout=0", 3);
  const Batch batch(16);
  DLTensor input{}, labels{};
  ASSERT_EQ(via_buffers.plugin().host_batch(via_buffers.get(), 32, &input, &labels), DPL_OK)
      << via_buffers.plugin().last_error();
  // A CPU model's buffers are plain host memory of the model's input shape and the capacity.
  EXPECT_EQ(input.device.device_type, kDLCPU);
  EXPECT_EQ(labels.device.device_type, kDLCPU);
  ASSERT_EQ(input.ndim, 4);
  EXPECT_EQ(std::vector<int64_t>(input.shape, input.shape + 4),
            (std::vector<int64_t>{32, 1, 28, 28}));
  EXPECT_EQ(input.dtype.code, kDLFloat);
  EXPECT_EQ(input.dtype.bits, 32);
  ASSERT_EQ(labels.ndim, 1);
  EXPECT_EQ(labels.shape[0], 32);
  EXPECT_EQ(labels.dtype.code, kDLInt);
  EXPECT_EQ(labels.dtype.bits, 64);
  // Fill a prefix of 16 and pass it with shape[0] = 16.
  std::copy(batch.images.begin(), batch.images.end(), Floats(input));
  std::copy(batch.labels.begin(), batch.labels.end(), static_cast<int64_t*>(labels.data));
  int64_t input_shape[4] = {16, 1, 28, 28}, label_shape[1] = {16};
  input.shape = input_shape;
  labels.shape = label_shape;
  float loss = NAN;
  ASSERT_EQ(via_buffers.plugin().train_step(via_buffers.get(), &input, &labels, &loss), DPL_OK)
      << via_buffers.plugin().last_error();
  EXPECT_EQ(loss, TrainStep(own, batch));
  EXPECT_EQ(via_buffers.plugin().host_batch(via_buffers.get(), 0, &input, &labels),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(via_buffers.plugin().last_error(),
               "model \"convnet\": host_batch capacity must be >= 1, got 0");
}

TEST(ConvNet, ReadAndWriteTensorsCopyEveryParameterBackToBack) {
  Model model("convnet", "");
  const std::vector<dpl_parameter_v2> parameters = model.Parameters();
  uint64_t total = 0;
  for (const auto& parameter : parameters) total += uint64_t(Elements(parameter.value));
  ASSERT_EQ(total, 300426u);  // the recipe's ConvNet
  TrainStep(model, Batch(4));
  std::vector<float> values(total), gradients(total);
  ASSERT_EQ(
      model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_VALUES, values.data(), total),
      DPL_OK)
      << model.plugin().last_error();
  ASSERT_EQ(model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS, gradients.data(),
                                        total),
            DPL_OK);
  size_t offset = 0;
  for (const auto& parameter : parameters) {
    for (int64_t i = 0; i < Elements(parameter.value); ++i) {
      ASSERT_EQ(values[offset + i], Floats(parameter.value)[i]) << parameter.name;
      ASSERT_EQ(gradients[offset + i], Floats(parameter.gradient)[i]) << parameter.name;
    }
    offset += size_t(Elements(parameter.value));
  }
  // Writing replaces the model's own tensors, which keep their addresses.
  for (size_t i = 0; i < total; ++i) values[i] = float(i % 7) - 3.0f;
  ASSERT_EQ(
      model.plugin().write_tensors(model.get(), DPL_MODEL_TENSORS_VALUES, values.data(), total),
      DPL_OK);
  const std::vector<dpl_parameter_v2> after = model.Parameters();
  offset = 0;
  for (size_t p = 0; p < after.size(); ++p) {
    EXPECT_EQ(after[p].value.data, parameters[p].value.data);
    for (int64_t i = 0; i < Elements(after[p].value); ++i) {
      ASSERT_EQ(Floats(after[p].value)[i], values[offset + i]) << after[p].name;
    }
    offset += size_t(Elements(after[p].value));
  }
  // A wrong count copies nothing and says what the model holds.
  EXPECT_EQ(
      model.plugin().write_tensors(model.get(), DPL_MODEL_TENSORS_VALUES, values.data(), total - 1),
      DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.plugin().last_error(),
               "model \"convnet\": the host buffer holds 300425 floats, the parameters 300426");
  EXPECT_EQ(Floats(after[0].value)[0], values[0]);
  EXPECT_EQ(model.plugin().read_tensors(model.get(), static_cast<dpl_model_tensors>(5),
                                        values.data(), total),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.plugin().last_error(), "model \"convnet\": unknown tensor set 5");
}

}  // namespace
