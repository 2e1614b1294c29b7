// BatchNorm's buffers (running mean and variance, num_batches_tracked) of a Python-defined model
// are broadcast from rank 0 before each forward pass, as DDP does: at 2 and 3 ranks, through gloo
// and tcp, every rank ends with rank 0's parameters AND buffers, bit for bit (--dump-parameters
// writes both). With --model-options broadcast_buffers=false each rank keeps its own statistics.
#include <cctype>
#include <cstdint>
#include <cstring>

#include "interop_support.hpp"

namespace dpl::interop_test {
namespace {

// residual_bn_cnn.py: three BatchNorm2d(12), each float32 running_mean and running_var of 12
// and an int64 num_batches_tracked, in that order.
constexpr size_t kBatchNorms = 3;
constexpr size_t kStatistics = 12;
constexpr size_t kBufferBytesPerNorm = 2 * kStatistics * sizeof(float) + sizeof(int64_t);
constexpr size_t kParameterBytes = 2914 * sizeof(float);
constexpr int64_t kSteps = 20;

int64_t BatchesTracked(const std::vector<char>& buffers, size_t norm) {
  int64_t count = -1;
  std::memcpy(&count, buffers.data() + norm * kBufferBytesPerNorm + 2 * kStatistics * sizeof(float),
              sizeof count);
  return count;
}

struct RankFiles {
  std::vector<char> parameters, buffers;
};

class BatchNormBuffers : public InteropTest {
 protected:
  // Trains the model on `ranks` workers through `backend` with `options` added to its model
  // options; every rank's --dump-parameters files.
  std::vector<RankFiles> Train(const std::string& backend, int ranks,
                               const std::string& options) const {
    std::string name = backend + "_" + std::to_string(ranks) + options;
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    const std::string dump = Folder(name);
    const JobResult job =
        Run({"--backend", backend, "--num-processes", std::to_string(ranks), "--batch-size", "48",
             "--max-steps", std::to_string(kSteps), "--no-eval", "--model", "torchscript",
             "--model-options", "file=" + Fixture("residual_bn_cnn.pt") + options,
             "--dump-parameters", dump},
            name);
    EXPECT_TRUE(job.ok()) << test::Describe(job.status) << "\n" << job.output;
    std::vector<RankFiles> files;
    for (int rank = 0; rank < ranks; ++rank) {
      const std::string prefix = dump + "/rank-" + std::to_string(rank);
      files.push_back({ReadBytes(prefix + ".bin"), ReadBytes(prefix + ".buffers.bin")});
      EXPECT_EQ(files.back().parameters.size(), kParameterBytes) << prefix;
      EXPECT_EQ(files.back().buffers.size(), kBatchNorms * kBufferBytesPerNorm) << prefix;
    }
    return files;
  }
};

class EveryRank : public BatchNormBuffers,
                  public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

TEST_P(EveryRank, EndsWithRankZerosParametersAndBuffers) {
  const auto [backend, ranks] = GetParam();
  const std::vector<RankFiles> files = Train(backend, ranks, "");
  ASSERT_EQ(files.size(), size_t(ranks));
  for (size_t norm = 0; norm < kBatchNorms; ++norm) {
    EXPECT_EQ(BatchesTracked(files[0].buffers, norm), kSteps) << "BatchNorm " << norm;
  }
  for (int rank = 1; rank < ranks; ++rank) {
    EXPECT_TRUE(files[size_t(rank)].parameters == files[0].parameters) << "rank " << rank;
    EXPECT_TRUE(files[size_t(rank)].buffers == files[0].buffers) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, EveryRank,
                         ::testing::Combine(::testing::Values(std::string("gloo"),
                                                              std::string("tcp")),
                                            ::testing::Values(2, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "_ranks";
                         });

// The option takes true/false as well as 1/0. Without the broadcast the gradients still keep the
// parameters identical, but each rank's running statistics are those of its own batches.
TEST_F(BatchNormBuffers, BroadcastBuffersFalseLeavesEachRankItsOwnRunningStatistics) {
  const std::vector<RankFiles> own = Train("gloo", 2, ",broadcast_buffers=false");
  ASSERT_EQ(own.size(), 2u);
  EXPECT_TRUE(own[1].parameters == own[0].parameters);
  EXPECT_FALSE(own[1].buffers == own[0].buffers) << "the ranks' running statistics are equal";
  EXPECT_EQ(BatchesTracked(own[1].buffers, 0), kSteps);

  const std::vector<RankFiles> shared = Train("gloo", 2, ",broadcast_buffers=true");
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_TRUE(shared[1].buffers == shared[0].buffers);
  EXPECT_TRUE(shared[0].parameters == own[0].parameters)
      << "in training BatchNorm normalises with the batch's statistics, whatever the buffers";
}

}  // namespace
}  // namespace dpl::interop_test
