// The forward pass's precision in the SDK's libtorch helper (model ABI v3 and later), through the
// C ABI: bf16 autocast on the CPU, fp16's loss scale, and what a device cannot run.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dpl/model.h"
#include "plugin_driver.hpp"

namespace {

using namespace dpl_test;

TEST(Precision, Bf16ForwardIsCloseToFp32OnTheCpu) {
  const Model fp32(Plugin("convnet"), Config("dropout=0", 3));
  const Model bf16(Plugin("convnet"), WithPrecision(Config("dropout=0", 3), DPL_PRECISION_BF16));
  EXPECT_EQ(fp32.Values(), bf16.Values()) << "float32 master parameters, the same initialisation";
  const Batch batch(16);
  const float loss32 = TrainStep(fp32, batch), loss16 = TrainStep(bf16, batch);
  EXPECT_NEAR(loss16, loss32, 0.02 * loss32);
  EXPECT_NE(loss16, loss32) << "the forward pass must run in bfloat16";
  std::vector<float> g32(300426), g16(300426);
  ASSERT_EQ(
      fp32.plugin().read_tensors(fp32.get(), DPL_MODEL_TENSORS_GRADIENTS, g32.data(), g32.size()),
      DPL_OK);
  ASSERT_EQ(
      bf16.plugin().read_tensors(bf16.get(), DPL_MODEL_TENSORS_GRADIENTS, g16.data(), g16.size()),
      DPL_OK);
  double dot = 0, norm32 = 0, norm16 = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    dot += double(g32[i]) * g16[i];
    norm32 += double(g32[i]) * g32[i];
    norm16 += double(g16[i]) * g16[i];
  }
  EXPECT_GT(dot / std::sqrt(norm32 * norm16), 0.99) << "the gradients point the same way";
  EXPECT_NEAR(std::sqrt(norm16), std::sqrt(norm32), 0.05 * std::sqrt(norm32));
  const Evaluation eval32 = EvalStep(fp32, batch), eval16 = EvalStep(bf16, batch);
  EXPECT_NEAR(eval16.loss_sum, eval32.loss_sum, 0.02 * eval32.loss_sum);
  // And it trains.
  for (int step = 0; step < 5; ++step) {
    Sgd(bf16, 0.05f);
    ASSERT_EQ(bf16.plugin().zero_gradients(bf16.get()), DPL_OK);
    TrainStep(bf16, batch);
  }
  EXPECT_LT(TrainStep(bf16, batch), 0.9f * loss16);
}

// set_loss_scale: backward runs on loss * scale; the loss is reported unscaled. A power of two
// changes no bit of the arithmetic, so the gradients are exactly the scale times the unscaled ones.
TEST(Precision, TheLossScaleMultipliesTheGradientsNotTheLoss) {
  for (const dpl_precision precision : {DPL_PRECISION_FP32, DPL_PRECISION_BF16}) {
    const Model model(Plugin("convnet"), WithPrecision(Config("dropout=0", 5), precision));
    const Batch batch(8);
    const size_t count = model.Values().size();
    std::vector<float> unscaled(count), scaled(count);
    const float loss = TrainStep(model, batch);
    ASSERT_EQ(model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS, unscaled.data(),
                                          count),
              DPL_OK);
    ASSERT_EQ(model.plugin().zero_gradients(model.get()), DPL_OK);
    ASSERT_EQ(model.plugin().set_loss_scale(model.get(), 1024.0f), DPL_OK) << model.error();
    EXPECT_EQ(TrainStep(model, batch), loss) << "the loss is reported unscaled";
    ASSERT_EQ(
        model.plugin().read_tensors(model.get(), DPL_MODEL_TENSORS_GRADIENTS, scaled.data(), count),
        DPL_OK);
    size_t exact = 0;
    for (size_t i = 0; i < count; ++i) exact += scaled[i] == 1024.0f * unscaled[i];
    EXPECT_EQ(exact, count) << "precision " << precision;
  }
  const Model model("mlp", "");
  for (const float bad : {0.0f, -2.0f, INFINITY, NAN}) {
    EXPECT_EQ(model.plugin().set_loss_scale(model.get(), bad), DPL_ERR_INVALID_ARGUMENT);
  }
  EXPECT_STREQ(model.error(), "model \"mlp\": loss scale nan is not a positive finite number");
  ASSERT_EQ(model.plugin().set_loss_scale(model.get(), -2.0f), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(model.error(), "model \"mlp\": loss scale -2 is not a positive finite number");
}

TEST(Precision, WhatTheDeviceCannotRunIsRefused) {
  std::string message;
  EXPECT_EQ(
      CreateStatus(Plugin("convnet"), WithPrecision(Config(""), DPL_PRECISION_FP16), &message),
      DPL_ERR_UNSUPPORTED);
  EXPECT_EQ(message,
            "model \"convnet\": precision fp16 is not supported on the CPU: dpl's CPU path runs "
            "bfloat16 only (float16 has no fast arithmetic on most CPUs, and libtorch 1.13's CPU "
            "autocast has none at all); use --precision bf16 or fp32");
  EXPECT_EQ(CreateStatus(Plugin("convnet"), WithPrecision(Config(""), dpl_precision(7)), &message),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(message,
            "model \"convnet\": precision 7 is unknown; model ABI v3 knows 0 (fp32), 1 (bf16) "
            "and 2 (fp16)");
}

}  // namespace
