// --precision, fp16's loss scaling, --lr-schedule, --clip-grad-norm and --weight-decay through the
// launcher: the test model plugin "scaled" (scaled_model.cpp: float32 softmax regression that
// takes fp16 on the CPU and puts an inf into one rank's gradient on request), and the convnet in
// bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher_runs.hpp"
#include "torch_reference.hpp"
#include "training/checkpoint.hpp"
#include "training/precision.hpp"

namespace dpl::test {
namespace {

namespace fs = std::filesystem;

bool PluginBuilt(const std::string& file) {
  return fs::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/" + file);
}

training::CheckpointState MustRead(const std::string& path) {
  Result<training::CheckpointState> state = training::ReadCheckpoint(path);
  EXPECT_TRUE(state.ok()) << state.status().message();
  return state.ok() ? *state : training::CheckpointState{};
}

// 256 images, global batches of 16: 16 optimizer steps an epoch.
class ScaledModelTest : public LauncherRunTest {
 protected:
  void SetUp() override {
    if (!PluginBuilt("libdpl_dataset_idx.so") || !PluginBuilt("libdpl_backend_tcp.so")) {
      GTEST_SKIP() << "the idx dataset or the tcp backend plugin is not built";
    }
    WriteData(256);
  }
  std::string Job(int processes, const std::string& learning_rate = "0.002") const {
    return Data() +
           "--plugin-dir " DPL_TEST_SCALED_MODEL_DIR
           " --model scaled --no-eval --batch-size 16 --optimizer sgd --lr " +
           learning_rate + " --num-processes " + std::to_string(processes) + " ";
  }
};

// The loss scale is a power of two, so scaling and unscaling change no bit: without an overflow an
// fp16 run of a float32 model is the fp32 run exactly, and its loss is reported unscaled.
TEST_F(ScaledModelTest, LossScalingWithoutOverflowChangesNoBit) {
  const std::string fp32 = Folder("fp32"), fp16 = Folder("fp16");
  const std::string args = Job(2) + "--backend tcp --max-steps 10 --log-interval 5 ";
  RunResult a = RunLauncher(args + "--dump-parameters " + fp32);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  RunResult b =
      RunLauncher(args + "--precision fp16 --grad-compression none --dump-parameters " + fp16);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<float> expected = ReadFloats(fp32 + "/rank-0.bin");
  ASSERT_EQ(expected.size(), 7850u);
  EXPECT_TRUE(expected == ReadFloats(fp16 + "/rank-0.bin"));
  EXPECT_TRUE(expected == ReadFloats(fp16 + "/rank-1.bin"));
  const std::regex loss_line(R"(\[10/10\] training loss: ([0-9.]+))");
  std::smatch loss32, loss16;
  ASSERT_TRUE(std::regex_search(a.output, loss32, loss_line)) << a.output;
  ASSERT_TRUE(std::regex_search(b.output, loss16, loss_line)) << b.output;
  EXPECT_EQ(loss32[1], loss16[1]) << "the loss must be reported unscaled";
  EXPECT_TRUE(Contains(b.output,
                       "fp16 loss scaling: 0 steps of 10 skipped for inf/NaN gradients; "
                       "the loss scale is 65536"))
      << b.output;
}

// Note [Same skip decision on every rank]: rank 1 alone sees an inf at step 3; both ranks skip it
// (else their parameters would part), halve the scale and train on.
class InfOnOneRankTest : public ScaledModelTest,
                         public ::testing::WithParamInterface<const char*> {};

TEST_P(InfOnOneRankTest, EveryRankSkipsTheStepAndHalvesTheScale) {
  if (!PluginBuilt(std::string("libdpl_backend_") + GetParam() + ".so")) {
    GTEST_SKIP() << "the " << GetParam() << " backend plugin is not built";
  }
  const std::string out = Folder("out"), checkpoints = dir_ + "/checkpoints";
  RunResult r =
      RunLauncher(Job(2) + "--backend " + GetParam() +
                  " --local-reduce backend --precision fp16 --grad-compression fp16 "
                  "--model-options "
                  "inf_rank=1,inf_step=3 --max-steps 6 --log-interval 1 --checkpoint-dir " +
                  checkpoints + " --dump-parameters " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "sent as fp16")) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "step 3: the fp16 gradients hold inf or NaN at loss scale 65536; the "
                       "optimizer step is skipped and the loss scale is now 32768 (1 step "
                       "skipped so far)"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "[6/6] training loss: ")) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "fp16 loss scaling: 1 step of 6 skipped for inf/NaN gradients; "
                       "the loss scale is 32768"))
      << r.output;
  const std::vector<float> r0 = ReadFloats(out + "/rank-0.bin");
  ASSERT_EQ(r0.size(), 7850u);
  for (float value : r0) ASSERT_TRUE(std::isfinite(value));
  EXPECT_TRUE(r0 == ReadFloats(out + "/rank-1.bin")) << "the ranks decided differently";
  const training::CheckpointState end = MustRead(checkpoints + "/checkpoint-0000000006.pt");
  EXPECT_EQ(end.global_step, 6);
  EXPECT_EQ(end.optimizer_steps, 5) << "one step skipped";
  ASSERT_TRUE(end.scaler.has_value());
  EXPECT_EQ(end.scaler->scale, 32768.0);
  EXPECT_EQ(end.scaler->growth_tracker, 3) << "steps 4, 5 and 6 were clean";
  EXPECT_EQ(end.scaler->skipped_steps, 1);
  EXPECT_EQ(end.scaler->growth_interval, 2000);
  EXPECT_EQ(end.scaler->growth_factor, 2.0);
  EXPECT_EQ(end.scaler->backoff_factor, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Backends, InfOnOneRankTest, ::testing::Values("tcp", "gloo"));

// The host-copy path (Note [Host copy of the parameters], as --device cuda runs it) unscales and
// skips alike: the same parameters as the in-place path, bit for bit.
TEST_F(ScaledModelTest, TheHostCopyPathSkipsAsTheInPlacePathDoes) {
  const std::string in_place = Folder("in_place"), host_copy = Folder("host_copy");
  const std::string args = Job(2) +
                           "--backend tcp --precision fp16 --model-options inf_rank=0,inf_step=2 "
                           "--max-steps 5 --dump-parameters ";
  // The host copy is summed in float32 whatever --grad-compression auto would pick.
  RunResult a = RunLauncher(args + in_place + " --grad-compression none");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  RunResult b = RunLauncher(args + host_copy + " --mirror-parameters");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(Contains(b.output, "the gradients are summed in float32 on this one machine"))
      << b.output;
  for (const RunResult* run : {&a, &b}) {
    EXPECT_TRUE(Contains(run->output, "step 2: the fp16 gradients hold inf or NaN")) << run->output;
  }
  const std::vector<float> expected = ReadFloats(in_place + "/rank-0.bin");
  ASSERT_EQ(expected.size(), 7850u);
  EXPECT_TRUE(expected == ReadFloats(host_copy + "/rank-0.bin"));
  EXPECT_TRUE(expected == ReadFloats(host_copy + "/rank-1.bin"));
}

// The scale halves at the skip, then doubles every 3 clean steps; a run resumed between two
// growths (tracker 2) ends where the straight run does, parameters and scaler alike.
TEST_F(ScaledModelTest, TheScalerStateResumesExactly) {
  const std::string straight = Folder("straight"), resumed = Folder("resumed");
  const std::string args = Job(2) +
                           "--backend tcp --precision fp16 --grad-compression none "
                           "--model-options inf_rank=1,inf_step=3 "
                           "--loss-scale-growth-interval 3 --checkpoint-every 5 ";
  RunResult full = RunLauncher(args + "--max-steps 9 --checkpoint-dir " + dir_ +
                               "/straight-checkpoints --dump-parameters " + straight);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult first = RunLauncher(args + "--max-steps 5 --checkpoint-dir " + checkpoints);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const training::CheckpointState middle = MustRead(checkpoints + "/checkpoint-0000000005.pt");
  ASSERT_TRUE(middle.scaler.has_value());
  EXPECT_EQ(middle.scaler->scale, 32768.0);
  EXPECT_EQ(middle.scaler->growth_tracker, 2);
  RunResult second = RunLauncher(args + "--max-steps 9 --resume --checkpoint-dir " + checkpoints +
                                 " --dump-parameters " + resumed);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_TRUE(Contains(second.output, "resumed from " + checkpoints + "/checkpoint-0000000005.pt"))
      << second.output;
  EXPECT_FALSE(Contains(second.output, "skipped so far")) << "step 3's inf must not come again";
  const std::vector<float> expected = ReadFloats(straight + "/rank-0.bin");
  ASSERT_EQ(expected.size(), 7850u);
  EXPECT_TRUE(expected == ReadFloats(resumed + "/rank-0.bin"));
  EXPECT_TRUE(expected == ReadFloats(resumed + "/rank-1.bin"));
  const training::CheckpointState a =
      MustRead(dir_ + "/straight-checkpoints/checkpoint-0000000009.pt");
  const training::CheckpointState b = MustRead(checkpoints + "/checkpoint-0000000009.pt");
  ASSERT_TRUE(a.scaler.has_value() && b.scaler.has_value());
  EXPECT_EQ(a.scaler->scale, 131072.0) << "32768 after the skip, grown at steps 6 and 9";
  EXPECT_EQ(a.scaler->growth_tracker, 0);
  EXPECT_EQ(b.scaler->scale, a.scaler->scale);
  EXPECT_EQ(b.scaler->growth_tracker, a.scaler->growth_tracker);
  EXPECT_EQ(b.scaler->skipped_steps, 1);
  EXPECT_EQ(b.optimizer_steps, 8);
}

// Each --lr-schedule, through the flags and the metrics file, against torch.optim.lr_scheduler
// (tests/training/lr_schedule_reference.py) step for step: two epochs of 16 steps, and a run that
// --max-steps ends in its third epoch (Note [The schedule spans the run]).
struct ScheduleCase {
  const char* name;
  const char* flags;
  const char* reference;  // lr_schedule_reference.py's NAME WARMUP STEP_SIZE GAMMA
};

void PrintTo(const ScheduleCase& c, std::ostream* out) {
  *out << c.name;
}

// The rates of the first `steps` optimizer steps in `metrics` against torch's schedule `c` over
// `steps` steps from `base_rate`.
void ExpectTorchsRates(const std::string& metrics, const ScheduleCase& c,
                       const std::string& base_rate, int steps, const std::string& output) {
  const std::string rates =
      training::torch_reference::ScratchPath(std::string("schedule-") + c.name);
  const std::string reference = c.reference;
  const std::string name = reference.substr(0, reference.find(' '));
  DPL_RUN_TORCH_REFERENCE("lr_schedule_reference.py",
                          rates + " " + name + " " + base_rate + " " + std::to_string(steps) +
                              reference.substr(name.size()) + " " + std::to_string(steps));
  std::ifstream in(rates, std::ios::binary);
  const std::vector<double> expected = training::torch_reference::ReadValues<double>(in, steps);
  std::remove(rates.c_str());
  ASSERT_EQ(expected.size(), size_t(steps));
  const std::vector<double> logged = StepMetric(metrics, "lr");
  ASSERT_EQ(logged.size(), size_t(steps)) << output;
  for (int step = 0; step < steps; ++step) {
    // The metrics file writes 9 decimals.
    EXPECT_NEAR(logged[size_t(step)], expected[size_t(step)], 6e-10)
        << "optimizer step " << step + 1;
  }
}

class ScheduleTest : public ScaledModelTest, public ::testing::WithParamInterface<ScheduleCase> {};

TEST_P(ScheduleTest, TheMetricsLearningRatesAreTorchs) {
  constexpr int kSteps = 32;
  const std::string metrics = dir_ + "/metrics.jsonl";
  RunResult r = RunLauncher(Job(2, "0.5") + "--backend tcp --epochs 2 --log-interval 1 --metrics " +
                            metrics + " " + GetParam().flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectTorchsRates(metrics, GetParam(), "0.5", kSteps, r.output);
}

// Three epochs would be 48 steps; --max-steps 40 ends the run, and the schedule, at step 40.
TEST_P(ScheduleTest, OverMaxStepsTheRatesAreTorchsOverThoseSteps) {
  constexpr int kSteps = 40;
  const std::string metrics = dir_ + "/metrics.jsonl";
  RunResult r = RunLauncher(Job(2, "0.1") +
                            "--backend tcp --epochs 3 --max-steps 40 --log-interval 1 --metrics " +
                            metrics + " " + GetParam().flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ExpectTorchsRates(metrics, GetParam(), "0.1", kSteps, r.output);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ScheduleTest,
    ::testing::Values(
        ScheduleCase{"ConstantWithWarmup", "--warmup-steps 4", "constant 4 0 0.1"},
        ScheduleCase{"Step", "--lr-schedule step --lr-step-size 5 --lr-gamma 0.7", "step 0 5 0.7"},
        ScheduleCase{"StepWithWarmup", "--lr-schedule step --lr-step-size 4 --warmup-steps 3",
                     "step 3 4 0.1"},
        ScheduleCase{"Cosine", "--lr-schedule cosine", "cosine 0 0 0.1"},
        ScheduleCase{"CosineWithWarmup", "--lr-schedule cosine --warmup-steps 6", "cosine 6 0 0.1"},
        ScheduleCase{"Linear", "--lr-schedule linear", "linear 0 0 0.1"},
        ScheduleCase{"LinearWithWarmup", "--lr-schedule linear --warmup-steps 5",
                     "linear 5 0 0.1"}),
    [](const ::testing::TestParamInfo<ScheduleCase>& info) { return info.param.name; });

TEST_F(ScaledModelTest, ScheduleFlagsThatDoNotFitTheRunAreRefused) {
  RunResult r = RunLauncher(Job(1) + "--lr-schedule cosine --warmup-steps 16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output,
                       "--lr-schedule cosine with --warmup-steps 16 needs more optimizer steps "
                       "than the run's 16; use fewer warmup steps, or more epochs or data"))
      << r.output;
}

// CosineAnnealingLR(T_max=40) from 0.1: 0.1 * (1 + cos(pi / 40)) / 2 = 0.0998459 at step 2, and
// 0.1 * (1 - cos(pi / 40)) / 2 = 0.000154 at step 40, the last; over the 48 steps of the epochs
// step 2 would run at 0.0998929 and step 40 at 0.00843.
TEST_F(ScaledModelTest, CosineAnnealsToTheEndOfMaxSteps) {
  const std::string metrics = dir_ + "/metrics.jsonl";
  RunResult r = RunLauncher(Job(2, "0.1") +
                            "--backend tcp --epochs 3 --max-steps 40 --log-interval 1 "
                            "--lr-schedule cosine --metrics " +
                            metrics);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<double> rates = StepMetric(metrics, "lr");
  ASSERT_EQ(rates.size(), 40u) << r.output;
  EXPECT_NEAR(rates[1], 0.0998458667, 1e-9);
  EXPECT_NEAR(rates[39], 0.0001541333, 1e-9);
}

TEST_F(ScaledModelTest, AWarmupLongerThanMaxStepsIsRefusedNamingIt) {
  RunResult r = RunLauncher(Job(1) +
                            "--epochs 2 --max-steps 8 --lr-schedule linear "
                            "--warmup-steps 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output,
                       "--lr-schedule linear with --warmup-steps 8 needs more optimizer steps "
                       "than the run's 8 (--max-steps); use fewer warmup steps or a larger "
                       "--max-steps"))
      << r.output;
}

// The convnet (libtorch), 1280 images, global batches of 64: 20 steps an epoch.
class ConvnetPrecisionTest : public LauncherRunTest {
 protected:
  void SetUp() override {
    if (!PluginBuilt("libdpl_model_convnet.so") || !PluginBuilt("libdpl_dataset_idx.so")) {
      GTEST_SKIP() << "libdpl_model_convnet.so or libdpl_dataset_idx.so is not built";
    }
    WriteData(1280);
  }
  std::string Job() const {
    return Data() + "--model-options dropout=0 --no-eval --num-processes 2 --batch-size 64 ";
  }
};

class Bf16RanksTest : public ConvnetPrecisionTest,
                      public ::testing::WithParamInterface<const char*> {};

// tcp and gloo (its pairwise exchange) sum the bf16 buckets in float32, and say they are bf16.
TEST_P(Bf16RanksTest, Bf16KeepsTheRanksBitIdentical) {
  const std::string backend = GetParam();
  if (!PluginBuilt("libdpl_backend_" + backend + ".so")) GTEST_SKIP() << backend << " not built";
  const std::string bf16 = Folder("bf16"), fp32 = Folder("fp32");
  const std::string args =
      Job() + "--backend " + backend + " --local-reduce backend --max-steps 6 --bucket-cap-mb 1 ";
  RunResult r =
      RunLauncher(args + "--precision bf16 --grad-compression bf16 --dump-parameters " + bf16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "on cpu, forward in bf16")) << r.output;
  EXPECT_TRUE(Contains(r.output, "sent as bf16")) << r.output;
  EXPECT_FALSE(Contains(r.output, "cannot allreduce bf16")) << r.output;
  const std::vector<float> r0 = ReadFloats(bf16 + "/rank-0.bin");
  ASSERT_EQ(r0.size(), 300426u);
  EXPECT_TRUE(r0 == ReadFloats(bf16 + "/rank-1.bin"));
  RunResult reference = RunLauncher(args + "--dump-parameters " + fp32);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_FALSE(r0 == ReadFloats(fp32 + "/rank-0.bin")) << "bf16 must reach the model";
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, Bf16RanksTest, ::testing::Values("tcp", "gloo"));

// Note [16-bit gradients between machines only]: on one machine --grad-compression auto sums a
// bf16 run's gradients in float32, the same bits as --grad-compression none, and says so.
TEST_F(ConvnetPrecisionTest, OneMachineSumsBf16TrainingsGradientsInFloat32) {
  const std::string automatic = Folder("auto"), none = Folder("none");
  const std::string args = Job() + "--precision bf16 --max-steps 4 --dump-parameters ";
  RunResult r = RunLauncher(args + automatic);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "the gradients are summed in float32 on this one machine "
                       "(--grad-compression auto sends bf16 buckets only between machines; with "
                       "--local-reduce backend, --grad-compression bf16 sends them here too)"))
      << r.output;
  EXPECT_FALSE(Contains(r.output, "sent as bf16")) << r.output;
  RunResult reference = RunLauncher(args + none + " --grad-compression none");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_FALSE(Contains(reference.output, "on this one machine")) << reference.output;
  const std::vector<float> expected = ReadFloats(none + "/rank-0.bin");
  ASSERT_EQ(expected.size(), 300426u);
  EXPECT_TRUE(expected == ReadFloats(automatic + "/rank-0.bin"));
  EXPECT_TRUE(expected == ReadFloats(automatic + "/rank-1.bin"));
}

TEST(GradientWireTest, AutoSendsThePrecisionsFormatBetweenMachinesOnly) {
  using training::Precision;
  using training::ResolveGradientWire;
  using training::WireFormat;
  const auto format = [](Precision precision, WireFormat requested, bool across) {
    return ResolveGradientWire(precision, requested, across).format;
  };
  EXPECT_EQ(format(Precision::kBf16, WireFormat::kAuto, true), WireFormat::kBf16);
  EXPECT_EQ(format(Precision::kFp16, WireFormat::kAuto, true), WireFormat::kFp16);
  EXPECT_EQ(format(Precision::kFp32, WireFormat::kAuto, true), WireFormat::kNone);
  EXPECT_EQ(format(Precision::kBf16, WireFormat::kAuto, false), WireFormat::kNone);
  EXPECT_TRUE(
      ResolveGradientWire(Precision::kBf16, WireFormat::kAuto, false).float32_on_one_machine);
  EXPECT_FALSE(
      ResolveGradientWire(Precision::kFp32, WireFormat::kAuto, false).float32_on_one_machine);
  // An explicit format wins anywhere.
  EXPECT_EQ(format(Precision::kBf16, WireFormat::kBf16, false), WireFormat::kBf16);
  EXPECT_EQ(format(Precision::kBf16, WireFormat::kNone, true), WireFormat::kNone);
  EXPECT_FALSE(ResolveGradientWire(Precision::kBf16, WireFormat::kFp16, true).from_precision);
}

// Note [The schedule spans the run]: resumed inside the warmup (step 4) and inside the cosine
// (step 11) with the straight run's flags, a bf16 run with SGD, weight decay and clipping ends as
// the straight one does, and logs the same learning rates.
TEST_F(ConvnetPrecisionTest, ResumeInsideWarmupAndCosineMatchesAStraightRun) {
  if (!PluginBuilt("libdpl_backend_tcp.so")) GTEST_SKIP() << "tcp not built";
  const std::string straight = Folder("straight"), resumed = Folder("resumed");
  const std::string flags = Job() +
                            "--backend tcp --precision bf16 --optimizer sgd --lr 0.05 "
                            "--momentum 0.9 --weight-decay 0.0005 --clip-grad-norm 0.5 "
                            "--lr-schedule cosine --warmup-steps 6 --log-interval 1 ";
  const std::string args = flags + "--max-steps 16 ";
  RunResult full = RunLauncher(args + "--checkpoint-every 4 --checkpoint-dir " + dir_ +
                               "/straight-checkpoints --metrics " + dir_ +
                               "/straight.jsonl --dump-parameters " + straight);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  // The straight run's checkpoint at step 4; from there to the end, writing step 11's on the way.
  const std::string checkpoints = dir_ + "/checkpoints";
  fs::create_directories(checkpoints);
  fs::copy_file(dir_ + "/straight-checkpoints/checkpoint-0000000004.pt",
                checkpoints + "/checkpoint-0000000004.pt");
  RunResult middle = RunLauncher(args + "--resume --checkpoint-every 11 --checkpoint-dir " +
                                 checkpoints + " --metrics " + dir_ + "/from-4.jsonl");
  ASSERT_EQ(middle.exit_code, 0) << middle.output;
  ASSERT_TRUE(fs::remove(checkpoints + "/checkpoint-0000000016.pt"));
  RunResult last = RunLauncher(args + "--resume --checkpoint-dir " + checkpoints + " --metrics " +
                               dir_ + "/from-11.jsonl --dump-parameters " + resumed);
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_TRUE(Contains(last.output, "checkpoint-0000000011.pt at epoch 0, batch 11"))
      << last.output;
  const std::vector<float> expected = ReadFloats(straight + "/rank-0.bin");
  ASSERT_EQ(expected.size(), 300426u);
  EXPECT_TRUE(expected == ReadFloats(resumed + "/rank-0.bin"));
  EXPECT_TRUE(expected == ReadFloats(resumed + "/rank-1.bin"));
  const std::vector<double> rates = StepMetric(dir_ + "/straight.jsonl", "lr");
  ASSERT_EQ(rates.size(), 16u);
  EXPECT_EQ(StepMetric(dir_ + "/from-4.jsonl", "lr"),
            std::vector<double>(rates.begin() + 4, rates.end()));
  EXPECT_EQ(StepMetric(dir_ + "/from-11.jsonl", "lr"),
            std::vector<double>(rates.begin() + 11, rates.end()));
  EXPECT_LT(rates[0], rates[5]) << "warming up";
  EXPECT_GT(rates[6], rates[15]) << "annealing";
  EXPECT_FALSE(Contains(middle.output + last.output, "drawn anew")) << middle.output;

  // Note [A schedule drawn anew on resume]: another --max-steps redraws the cosine: said.
  ASSERT_TRUE(fs::remove(checkpoints + "/checkpoint-0000000016.pt"));
  RunResult longer = RunLauncher(flags + "--max-steps 12 --resume --checkpoint-dir " + checkpoints);
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(Contains(longer.output,
                       "checkpoint-0000000011.pt was written under --lr-schedule cosine over 16 "
                       "optimizer steps, and this run's schedule spans 12: the learning rate of "
                       "step 11 is "))
      << longer.output;
}

TEST_F(ConvnetPrecisionTest, Fp16OnTheCpuIsRefusedWithTheReason) {
  RunResult r = RunLauncher(Job() + "--precision fp16 --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output,
                       "precision fp16 is not supported on the CPU: dpl's CPU path runs bfloat16 "
                       "only (float16 has no fast arithmetic on most CPUs"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "; use --precision bf16 or fp32")) << r.output;
}

// Only model ABI v3 is told the precision: an older plugin is refused, not run in fp32 silently.
TEST_F(ConvnetPrecisionTest, AModelOfAnOlderAbiIsRefusedLowPrecision) {
  RunResult r = RunLauncher(Data() + "--plugin-dir " DPL_TEST_V1_MODEL_DIR
                                     " --model logreg_v1 --precision bf16 --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output,
                       "model 'logreg_v1' is a model ABI v1 plugin, which computes in float32 "
                       "only; --precision bf16 needs a plugin built against the dpl SDK's model "
                       "ABI v3 (or use --precision fp32)"))
      << r.output;
}

// A training loss that is not finite is said once, with its step and what to do, in float32 as
// in any precision; the run goes on (a diverged run may still be wanted for its log).
TEST_F(ScaledModelTest, ALossThatIsNotFiniteIsSaidOnce) {
  WriteData(480);
  const RunResult run = RunLauncher(Data() +
                                    "--model mlp --no-eval --batch-size 48 --optimizer sgd "
                                    "--lr 1e30 --max-steps 8 --log-interval 1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(Contains(run.output, "warning: the training loss is ")) << run.output;
  EXPECT_TRUE(Contains(run.output,
                       ": the training diverged (a lower --lr helps) or the data "
                       "holds NaN or infinite values; the run goes on"))
      << run.output;
  const size_t first = run.output.find("warning: the training loss is ");
  EXPECT_EQ(run.output.find("warning: the training loss is ", first + 1), std::string::npos)
      << "said more than once:\n"
      << run.output;
}

}  // namespace
}  // namespace dpl::test
