// End-to-end runs of the launcher with the convnet model and a CPU backend ("auto"): data-parallel
// equivalence, parameters identical across ranks, resume equality and Fashion-MNIST accuracy.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "launcher_runs.hpp"
#include "support/idx_writer.hpp"
#include "support/relative_difference.hpp"
#include "support/shell_capture.hpp"

namespace {

namespace fs = std::filesystem;
using ::dpl::testing::RelativeDifference;

bool ConvnetPluginAvailable() {
  std::string dirs = DPL_TEST_PLUGIN_DIR;
  if (const char* extra = std::getenv("DPL_PLUGIN_PATH")) dirs += std::string(":") + extra;
  std::stringstream list(dirs);
  for (std::string dir; std::getline(list, dir, ':');) {
    if (fs::exists(dir + "/libdpl_model_convnet.so")) return true;
  }
  return false;
}

using dpl::test::ReadFloats;
using dpl::test::RunLauncher;
using dpl::test::RunResult;

// How many values of `a` and `b` (parameters of one model) differ by more than 1e-3.
size_t CountFarApart(const std::vector<float>& a, const std::vector<float>& b) {
  size_t far = 0;
  for (size_t i = 0; i < a.size(); ++i) far += std::fabs(a[i] - b[i]) > 1e-3f;
  return far;
}

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ConvnetPluginAvailable()) GTEST_SKIP() << "libdpl_model_convnet.so is not built";
    char pattern[] = "/tmp/dpl-e2e-XXXXXX";
    dir_ = ::mkdtemp(pattern);
    // 1280 synthetic 28x28 images: 20 steps of 64 fit in one epoch.
    using namespace ::dpl::testing;
    WriteGz(dir_ + "/train-images-idx3-ubyte.gz", IdxImages(1280, 28, 28));
    WriteGz(dir_ + "/train-labels-idx1-ubyte.gz", IdxLabels(1280));
    WriteGz(dir_ + "/t10k-images-idx3-ubyte.gz", IdxImages(100, 28, 28));
    WriteGz(dir_ + "/t10k-labels-idx1-ubyte.gz", IdxLabels(100));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string Dump(const std::string& name) {
    const std::string path = dir_ + "/" + name;
    fs::create_directories(path);
    return path;
  }
  // A cache folder of its own (Note [Data cache]), removed with the test's folder.
  std::string Data() const {
    return "--data-dir " + dir_ + " --data-cache " + dir_ + "/cache --seed 3 --log-interval 5 ";
  }
  std::string Common() const { return Data() + "--model-options dropout=0 "; }

  // `arguments` run in place and again with `variant`, both dumping their parameters.
  struct PathRuns {
    RunResult in_place, variant;
    std::vector<float> expected, got;  // rank 0's parameters of each
    bool replicas_agree = true;        // the variant's rank 1, if any, holds its rank 0's bits
  };
  PathRuns RunBothPaths(const std::string& arguments, const std::string& variant) {
    const std::string in_place = Dump("in_place"), other = Dump("variant");
    const std::string args = Common() + arguments + " --dump-parameters ";
    PathRuns runs;
    runs.in_place = RunLauncher(args + in_place);
    runs.variant = RunLauncher(args + other + " " + variant);
    runs.expected = ReadFloats(in_place + "/rank-0.bin");
    runs.got = ReadFloats(other + "/rank-0.bin");
    if (fs::exists(other + "/rank-1.bin")) {
      runs.replicas_agree = runs.got == ReadFloats(other + "/rank-1.bin");
    }
    return runs;
  }
  std::string dir_;
};

TEST_F(EndToEndTest, TwoRanksOfHalfBatchMatchOneRankOfFullBatch) {
  const std::string one = Dump("one"), two = Dump("two");
  RunResult a = RunLauncher(Common() +
                            "--num-processes 1 --batch-size 64 --max-steps 20 "
                            "--dump-parameters " +
                            one);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // The first run left the inflated data in the cache, which the second run reads.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ + "/cache"), fs::directory_iterator()), 4);
  const std::string metrics = dir_ + "/metrics.jsonl";
  RunResult b = RunLauncher(Common() +
                            "--num-processes 2 --batch-size 64 --max-steps 20 "
                            "--metrics " +
                            metrics + " --dump-parameters " + two);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  std::ifstream metrics_lines(metrics);
  std::vector<std::string> lines;
  for (std::string line; std::getline(metrics_lines, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u);  // steps 5, 10, 15, 20, the epoch, the evaluation
  const std::regex step_line(R"(\{"kind": "step", "epoch": 0, "step": 20, "batch": 20, )"
                             R"("loss": [0-9.]+, "lr": 0.5, "samples_per_s": [0-9.]+, )"
                             R"("time_s": [0-9.]+, "phase_ms": \{"data": [0-9.]+, )"
                             R"("forward_backward": [0-9.]+, "communication_wait": [0-9.]+, )"
                             R"("optimizer": [0-9.]+, "host_copies": 0\}\})");
  EXPECT_TRUE(std::regex_match(lines[3], step_line)) << lines[3];
  EXPECT_EQ(lines[4].rfind(R"({"kind": "epoch", "epoch": 0, "step": 20, )", 0), 0u) << lines[4];
  EXPECT_EQ(lines[5].rfind(R"({"kind": "eval", "epoch": 0, "step": 20, )", 0), 0u) << lines[5];
  EXPECT_NE(a.output.find("epoch: 0 [10/20] training loss: "), std::string::npos) << a.output;
  const std::vector<float> p1 = ReadFloats(one + "/rank-0.bin");
  const std::vector<float> r0 = ReadFloats(two + "/rank-0.bin");
  const std::vector<float> r1 = ReadFloats(two + "/rank-1.bin");
  ASSERT_GT(p1.size(), 100000u);
  ASSERT_EQ(p1.size(), r0.size());
  EXPECT_TRUE(r0 == r1) << "ranks' parameters differ";
  EXPECT_LE(CountFarApart(p1, r0), p1.size() / 1000)
      << "parameters of world 1 x 64 and world 2 x 32 differ";
}

// Small buckets (1 MiB cap: four collectives per step) through each CPU backend.
class BitIdenticalTest : public EndToEndTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(BitIdenticalTest, ThreeRanksStayBitIdentical) {
  const std::string out = Dump("three");
  RunResult r = RunLauncher(Common() + "--backend " + GetParam() +
                            " --num-processes 3 --batch-size 48 --max-steps 8 "
                            "--bucket-cap-mb 1 --dump-parameters " +
                            out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<float> r0 = ReadFloats(out + "/rank-0.bin");
  ASSERT_FALSE(r0.empty());
  EXPECT_TRUE(r0 == ReadFloats(out + "/rank-1.bin")) << "backend " << GetParam();
  EXPECT_TRUE(r0 == ReadFloats(out + "/rank-2.bin")) << "backend " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, BitIdenticalTest, ::testing::Values("gloo", "tcp"));

TEST_F(EndToEndTest, ResumedRunEndsWithTheSameParameters) {
  const std::string straight = Dump("straight"), resumed = Dump("resumed");
  const std::string args = Common() + "--num-processes 2 --batch-size 64 ";
  RunResult full = RunLauncher(args + "--max-steps 16 --dump-parameters " + straight);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult first =
      RunLauncher(args + "--max-steps 8 --checkpoint-every 4 --checkpoint-dir " + checkpoints);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(fs::exists(checkpoints + "/checkpoint-0000000004.pt"));
  EXPECT_TRUE(fs::exists(checkpoints + "/checkpoint-0000000008.pt"));
  RunResult second = RunLauncher(args + "--max-steps 16 --resume --checkpoint-dir " + checkpoints +
                                 " --dump-parameters " + resumed);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + checkpoints + "/checkpoint-0000000008.pt"),
            std::string::npos)
      << second.output;
  const std::vector<float> a = ReadFloats(straight + "/rank-0.bin");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadFloats(resumed + "/rank-0.bin"));
}

// A checkpoint records the options that change the math; resuming with another value of one is
// refused before the first step, naming the option, both values and the checkpoint, and the
// checkpoint is left as it was.
TEST_F(EndToEndTest, ResumingWithAnotherLearningRateIsRefusedNamingBothValues) {
  const std::string args = Common() + "--num-processes 2 --batch-size 64 ";
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult first = RunLauncher(args + "--lr 0.5 --max-steps 4 --checkpoint-every 4 " +
                                "--checkpoint-dir " + checkpoints);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string checkpoint = checkpoints + "/checkpoint-0000000004.pt";
  const auto written = fs::last_write_time(checkpoint);
  RunResult second =
      RunLauncher(args + "--lr 0.25 --max-steps 8 --resume --checkpoint-dir " + checkpoints);
  EXPECT_NE(second.exit_code, 0) << second.output;
  const std::string refusal =
      "checkpoint " + checkpoint + " was written with --lr 0.5 but this run has --lr 0.25";
  EXPECT_NE(second.output.find(refusal), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("training loss"), std::string::npos) << second.output;
  EXPECT_EQ(fs::last_write_time(checkpoint), written);
  EXPECT_FALSE(fs::exists(checkpoints + "/checkpoint-0000000008.pt"));
}

TEST_F(EndToEndTest, GradientAccumulationMatchesTheLargerBatch) {
  const std::string big = Dump("big"), accumulated = Dump("accumulated");
  RunResult a = RunLauncher(Common() +
                            "--num-processes 1 --batch-size 64 --max-steps 6 "
                            "--dump-parameters " +
                            big);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  RunResult b = RunLauncher(Common() +
                            "--num-processes 2 --batch-size 32 --grad-accum 2 "
                            "--max-steps 6 --dump-parameters " +
                            accumulated);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<float> p = ReadFloats(big + "/rank-0.bin");
  const std::vector<float> q = ReadFloats(accumulated + "/rank-0.bin");
  ASSERT_EQ(p.size(), q.size());
  EXPECT_LE(CountFarApart(p, q), p.size() / 1000)
      << "--grad-accum 2 of 32 differs from one batch of 64";
}

// 16-bit gradients through gloo, fp16 and bf16.
TEST_F(EndToEndTest, CompressedGradientsKeepRanksIdentical) {
  for (const char* format : {"fp16", "bf16"}) {
    const std::string out = Dump(format);
    RunResult r = RunLauncher(Common() + "--num-processes 2 --batch-size 64 --max-steps 4 " +
                              "--grad-compression " + format + " --dump-parameters " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<float> r0 = ReadFloats(out + "/rank-0.bin");
    ASSERT_FALSE(r0.empty());
    EXPECT_TRUE(r0 == ReadFloats(out + "/rank-1.bin")) << format;
  }
}

// Note [Host copy of the parameters] (the --device cuda --offload-optimizer path) run on the
// CPU: the optimizer works on a host copy, gradients are summed in the model's memory and scaled
// once read. It must give exactly the parameters of the in-place path. Without
// --offload-optimizer the model's own optimizer updates its parameters where they are (Note
// [Device optimizer placement]): torch.optim's multi-tensor arithmetic, which agrees with the
// host's to float rounding, and replicas that agree bit for bit.
struct HostCopyCase {
  const char* name;
  const char* arguments;
};

void PrintTo(const HostCopyCase& host_copy_case, std::ostream* out) {
  *out << host_copy_case.name;
}

class HostCopyTest : public EndToEndTest, public ::testing::WithParamInterface<HostCopyCase> {};

TEST_P(HostCopyTest, GivesBitIdenticalParametersToTheInPlacePath) {
  const PathRuns runs =
      RunBothPaths(GetParam().arguments, "--mirror-parameters --offload-optimizer");
  ASSERT_EQ(runs.in_place.exit_code, 0) << runs.in_place.output;
  ASSERT_EQ(runs.variant.exit_code, 0) << runs.variant.output;
  EXPECT_NE(runs.variant.output.find("the optimizer updates a host copy of the 300426 parameters"),
            std::string::npos)
      << runs.variant.output;
  EXPECT_NE(runs.variant.output.find(", host copies "), std::string::npos) << runs.variant.output;
  ASSERT_FALSE(runs.expected.empty());
  EXPECT_TRUE(runs.expected == runs.got);
  EXPECT_TRUE(runs.replicas_agree);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, HostCopyTest,
    ::testing::Values(
        HostCopyCase{"TwoRanks",
                     "--num-processes 2 --batch-size 64 --max-steps 8 --bucket-cap-mb 1"},
        HostCopyCase{"OneRankAccumulating",
                     "--num-processes 1 --batch-size 32 --grad-accum 2 --max-steps 4"},
        HostCopyCase{"TwoRanksAdam",
                     "--num-processes 2 --batch-size 64 --max-steps 6 "
                     "--optimizer adam --lr 0.001"}),
    [](const ::testing::TestParamInfo<HostCopyCase>& info) { return info.param.name; });

class DeviceOptimizerTest : public EndToEndTest,
                            public ::testing::WithParamInterface<HostCopyCase> {};

TEST_P(DeviceOptimizerTest, AgreesWithTheInPlacePathAndKeepsReplicasIdentical) {
  const PathRuns runs = RunBothPaths(GetParam().arguments, "--mirror-parameters");
  ASSERT_EQ(runs.in_place.exit_code, 0) << runs.in_place.output;
  ASSERT_EQ(runs.variant.exit_code, 0) << runs.variant.output;
  EXPECT_NE(runs.variant.output.find("the optimizer runs in the model, where its parameters are"),
            std::string::npos)
      << runs.variant.output;
  EXPECT_EQ(runs.variant.output.find("host copy"), std::string::npos) << runs.variant.output;
  ASSERT_FALSE(runs.expected.empty());
  ASSERT_EQ(runs.got.size(), runs.expected.size());
  EXPECT_LE(RelativeDifference(runs.got, runs.expected), 1e-4);
  EXPECT_TRUE(runs.replicas_agree);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, DeviceOptimizerTest,
    ::testing::Values(
        HostCopyCase{"TwoRanksAdadelta",
                     "--num-processes 2 --batch-size 64 --max-steps 6 --bucket-cap-mb 1"},
        HostCopyCase{"OneRankAccumulatingSgd",
                     "--num-processes 1 --batch-size 32 --grad-accum 2 --max-steps 4 "
                     "--optimizer sgd --momentum 0.9 --lr 0.05 --weight-decay 0.01"},
        HostCopyCase{"TwoRanksAdamWClipped",
                     "--num-processes 2 --batch-size 64 --max-steps 6 --optimizer adamw "
                     "--lr 0.001 --weight-decay 0.1 --clip-grad-norm 0.5"}),
    [](const ::testing::TestParamInfo<HostCopyCase>& info) { return info.param.name; });

// The device optimizer's state goes into the checkpoint and back (by state index).
TEST_F(EndToEndTest, ResumeThroughTheDeviceOptimizerMatchesAStraightRun) {
  const std::string straight = Dump("straight"), resumed = Dump("resumed");
  const std::string args = Common() +
                           "--num-processes 2 --batch-size 64 --mirror-parameters "
                           "--optimizer adamw --lr 0.001 ";
  RunResult full = RunLauncher(args + "--max-steps 8 --dump-parameters " + straight);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const std::string checkpoints = dir_ + "/checkpoints";
  RunResult first = RunLauncher(args + "--max-steps 4 --checkpoint-dir " + checkpoints);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  RunResult second = RunLauncher(args + "--max-steps 8 --resume --checkpoint-dir " + checkpoints +
                                 " --dump-parameters " + resumed);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::vector<float> a = ReadFloats(straight + "/rank-0.bin");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadFloats(resumed + "/rank-0.bin"));
  EXPECT_TRUE(a == ReadFloats(resumed + "/rank-1.bin"));
  // The same checkpoint resumes on the host's optimizer (the state's layout and names are one).
  RunResult host = RunLauncher(Common() +
                               "--num-processes 2 --batch-size 64 --optimizer adamw --lr 0.001 "
                               "--max-steps 8 --resume --checkpoint-dir " +
                               checkpoints + " --dump-parameters " + resumed);
  ASSERT_EQ(host.exit_code, 0) << host.output;
  EXPECT_LE(RelativeDifference(ReadFloats(resumed + "/rank-0.bin"), a), 1e-4);
}

// Where a GPU is (never in CI: Debian's libtorch is CPU-only; tools/gpu_check.sh compares the
// same two on the GPU machine): the update on the GPU, the default, and --offload-optimizer's on
// the host copy train alike.
TEST_F(EndToEndTest, OnCudaTheGpuOptimizerTrainsAsTheHostCopyDoes) {
  const std::string device = Dump("device"), offload = Dump("offload");
  const std::string args = Common() +
                           "--device cuda --num-processes 1 --batch-size 64 --max-steps 10 "
                           "--optimizer adamw --lr 0.001 --dump-parameters ";
  RunResult on_gpu = RunLauncher(args + device);
  if (on_gpu.exit_code != 0 && on_gpu.output.find("DPL_ERR_NO_DEVICE") != std::string::npos) {
    GTEST_SKIP() << "no CUDA device for the convnet plugin here (its libtorch or the machine)";
  }
  ASSERT_EQ(on_gpu.exit_code, 0) << on_gpu.output;
  EXPECT_NE(on_gpu.output.find("the optimizer runs in the model"), std::string::npos)
      << on_gpu.output;
  RunResult on_host = RunLauncher(args + offload + " --offload-optimizer");
  ASSERT_EQ(on_host.exit_code, 0) << on_host.output;
  EXPECT_NE(on_host.output.find("the optimizer updates a host copy"), std::string::npos)
      << on_host.output;
  const std::vector<float> expected = ReadFloats(offload + "/rank-0.bin");
  ASSERT_FALSE(expected.empty());
  EXPECT_LE(RelativeDifference(ReadFloats(device + "/rank-0.bin"), expected), 1e-4);
}

TEST_F(EndToEndTest, OffloadOptimizerOnACpuModelIsRefusedWithWhy) {
  RunResult r = RunLauncher(Common() + "--offload-optimizer --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("a CPU model's optimizer runs there already: drop --offload-optimizer"),
            std::string::npos)
      << r.output;
}

// No GPU here and Debian's libtorch is CPU-only: --device cuda fails at once with what to do.
TEST_F(EndToEndTest, CudaWithoutCudaSaysWhyAndWhatToDo) {
  RunResult host_backend = RunLauncher(Common() + "--device cuda --backend gloo --max-steps 1");
  EXPECT_NE(host_backend.exit_code, 0);
  EXPECT_NE(host_backend.output.find(
                std::string("create failed with DPL_ERR_NO_DEVICE: model \"convnet\": ") +
                dpl::testing::NoCudaDeviceMessage()),
            std::string::npos)
      << host_backend.output;
  if (!fs::exists(std::string(DPL_TEST_PLUGIN_DIR) + "/libdpl_backend_nccl.so")) {
    GTEST_SKIP() << "the nccl plugin is not built here (no CUDA toolkit and NCCL)";
  }
  RunResult nccl = RunLauncher(Common() + "--device cuda --max-steps 1");
  EXPECT_NE(nccl.exit_code, 0);
  EXPECT_NE(nccl.output.find("--backend auto chose nccl"), std::string::npos) << nccl.output;
  EXPECT_NE(nccl.output.find("NCCL needs a CUDA device and this machine has none; train on the CPU "
                             "with --device cpu (and --backend gloo where you named nccl)"),
            std::string::npos)
      << nccl.output;
}

// A model plugin of ABI v1 (tests/training/v1_model.cpp) still trains, on the CPU.
TEST_F(EndToEndTest, ModelAbiV1PluginTrainsOnTheCpuOnly) {
  const std::string plugin_dir = " --plugin-dir " DPL_TEST_V1_MODEL_DIR " --model logreg_v1 ";
  const std::string out = Dump("v1");
  RunResult trained = RunLauncher(Data() + plugin_dir +
                                  "--num-processes 2 --batch-size 64 --max-steps 5 "
                                  "--dump-parameters " +
                                  out);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("test set: average loss: "), std::string::npos) << trained.output;
  const std::vector<float> r0 = ReadFloats(out + "/rank-0.bin");
  ASSERT_EQ(r0.size(), 7850u);  // Linear(784, 10)
  EXPECT_TRUE(r0 == ReadFloats(out + "/rank-1.bin"));
  for (const char* flag : {"--device cuda --backend gloo", "--mirror-parameters"}) {
    RunResult refused = RunLauncher(Data() + plugin_dir + flag + " --max-steps 1");
    EXPECT_NE(refused.exit_code, 0) << flag;
    EXPECT_NE(refused.output.find("model 'logreg_v1' is a model ABI v1 plugin, which trains on "
                                  "the CPU with its parameters updated in place; rebuild it "
                                  "against the dpl SDK (model ABI v2) for " +
                                  std::string(flag).substr(0, std::string(flag).find(" --"))),
              std::string::npos)
        << refused.output;
  }
}

TEST(FashionMnist, OneEpochOnTwoProcessesReaches85Percent) {
  if (!ConvnetPluginAvailable()) GTEST_SKIP() << "libdpl_model_convnet.so is not built";
  RunResult r = RunLauncher("--num-processes 2 --batch-size 128 --epochs 1 --log-interval 100");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(r.output, match, std::regex(R"(accuracy: (\d+)/(\d+))")))
      << r.output;
  std::cout << "Fashion-MNIST, 1 epoch, 2 processes: " << match[0] << "\n";
  EXPECT_EQ(std::stoi(match[2]), 10000);
  EXPECT_GE(std::stoi(match[1]), 8500) << r.output;
}

}  // namespace
