// The idx plugin against the launcher's former built-in reader (launcher/training/idx_dataset)
// on the real Fashion-MNIST files: every float and label the same, bit for bit, so losses stay
// identical. This test goes away with that reader.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "dataset_loader.hpp"
#include "training/idx_dataset.hpp"

namespace dpl::datasets::testing {
namespace {

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

class IdxReferenceTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(IdxReferenceTest, FashionMnistGivesTheLaunchersFormerBytes) {
  if (!std::filesystem::exists(std::string(kFashionMnist) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << kFashionMnist << " is missing (dataset-fashion-mnist)";
  }
  const int32_t split = GetParam();
  const Result<training::Dataset> reference = training::LoadIdxDataset(
      kFashionMnist, split == DPL_DATASET_SPLIT_TRAIN ? training::DatasetSplit::kTrain
                                                      : training::DatasetSplit::kTest);
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  Settings settings;
  settings.path = kFashionMnist;
  settings.split = split;
  settings.num_threads = 2;
  Dataset dataset("idx", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const dpl_dataset_info_v1 info = dataset.Info();
  ASSERT_EQ(info.count, reference->count);
  EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{1, reference->rows, reference->columns}));
  EXPECT_EQ(info.num_classes, 10);
  const Batch batch = dataset.FillAll(/*epoch=*/3);
  const int64_t elements = reference->SampleElements();
  std::vector<float> expected(size_t(reference->count * elements));
  for (int64_t i = 0; i < reference->count; ++i) {
    reference->NormalisedSample(i, expected.data() + i * elements);
  }
  ASSERT_EQ(batch.input.size(), expected.size());
  EXPECT_EQ(std::memcmp(batch.input.data(), expected.data(), expected.size() * sizeof(float)), 0);
  EXPECT_EQ(batch.labels, reference->labels);
}

INSTANTIATE_TEST_SUITE_P(Splits, IdxReferenceTest,
                         ::testing::Values(DPL_DATASET_SPLIT_TRAIN, DPL_DATASET_SPLIT_TEST));

}  // namespace
}  // namespace dpl::datasets::testing
