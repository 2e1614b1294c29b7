#include "training/idx_dataset.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "idx_writer.hpp"

namespace dpl::training {
namespace {

using testing::IdxImages;
using testing::IdxLabels;
using testing::WriteGz;
using testing::WriteRaw;

class IdxDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dpl-idx-XXXXXX";
    dir_ = ::mkdtemp(pattern);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(IdxDatasetTest, ReadsGzippedAndNormalises) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->count, 5);
  EXPECT_EQ(d->rows, 4);
  EXPECT_EQ(d->columns, 3);
  ASSERT_EQ(d->pixels.size(), 60u);
  std::vector<float> sample(12);
  for (size_t i = 0; i < 60; ++i) {
    if (i % 12 == 0) d->NormalisedSample(int64_t(i / 12), sample.data());
    const float expected = (float((i * 7) % 256) / 255.0f - 0.1302f) / 0.3069f;
    EXPECT_NEAR(sample[i % 12], expected, 1e-6f) << i;
  }
  EXPECT_EQ(d->labels, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_F(IdxDatasetTest, ReadsRawFiles) {
  WriteRaw(Path("t10k-images-idx3-ubyte"), IdxImages(3, 2, 2));
  WriteRaw(Path("t10k-labels-idx1-ubyte"), IdxLabels(3));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTest);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->count, 3);
  EXPECT_EQ(d->images_path, Path("t10k-images-idx3-ubyte"));
}

TEST_F(IdxDatasetTest, MissingFileNamesBothCandidates) {
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            "missing data file: looked for " + Path("train-images-idx3-ubyte.gz") + " and " +
                Path("train-images-idx3-ubyte") +
                "; pass --data-dir with the folder holding the MNIST-format files");
}

TEST_F(IdxDatasetTest, WrongMagic) {
  WriteRaw(Path("train-images-idx3-ubyte"), IdxImages(2, 2, 2, 0x00000801));
  WriteRaw(Path("train-labels-idx1-ubyte"), IdxLabels(2));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), Path("train-images-idx3-ubyte") +
                                      ": wrong magic number 0x00000801, expected 0x00000803 "
                                      "(IDX unsigned-byte images)");
}

TEST_F(IdxDatasetTest, WrongLabelMagic) {
  WriteRaw(Path("train-images-idx3-ubyte"), IdxImages(2, 2, 2));
  WriteRaw(Path("train-labels-idx1-ubyte"), IdxLabels(2, 10, 0x12345678));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), Path("train-labels-idx1-ubyte") +
                                      ": wrong magic number 0x12345678, expected 0x00000801 "
                                      "(IDX unsigned-byte labels)");
}

TEST_F(IdxDatasetTest, TruncatedPixels) {
  std::vector<uint8_t> images = IdxImages(4, 2, 2);
  images.resize(images.size() - 3);
  WriteGz(Path("train-images-idx3-ubyte.gz"), images);
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(4));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), Path("train-images-idx3-ubyte.gz") +
                                      ": truncated: the header declares 4 images of 2x2 (16 "
                                      "bytes) but only 13 bytes of pixels follow");
}

TEST_F(IdxDatasetTest, TruncatedHeader) {
  WriteRaw(Path("train-images-idx3-ubyte"), {0, 0, 8});
  WriteRaw(Path("train-labels-idx1-ubyte"), IdxLabels(4));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            Path("train-images-idx3-ubyte") +
                ": truncated: 3 bytes, shorter than the 16-byte IDX image header");
}

TEST_F(IdxDatasetTest, CountMismatch) {
  WriteRaw(Path("train-images-idx3-ubyte"), IdxImages(4, 2, 2));
  WriteRaw(Path("train-labels-idx1-ubyte"), IdxLabels(5));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "image/label count mismatch: " + Path("train-images-idx3-ubyte") +
                                      " holds 4 images but " + Path("train-labels-idx1-ubyte") +
                                      " holds 5 labels");
}

// Note [Data cache]: the files in a cache folder, by name.
std::vector<std::string> CacheFiles(const std::string& directory) {
  std::vector<std::string> names;
  if (!std::filesystem::exists(directory)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The cache entry whose name ends in "-<base_name>" (names start with a hash of the source).
std::string CacheEntry(const std::string& directory, const std::string& base_name) {
  for (const std::string& name : CacheFiles(directory)) {
    const std::string suffix = "-" + base_name;
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return directory + "/" + name;
    }
  }
  return "";
}

std::vector<uint8_t> Pixels(const Dataset& dataset) {
  return std::vector<uint8_t>(dataset.pixels.data(), dataset.pixels.data() + dataset.pixels.size());
}

TEST_F(IdxDatasetTest, CacheHoldsTheInflatedFilesAndServesTheNextLoad) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  const std::string cache = Path("cache/nested");  // created on first use
  Result<Dataset> first = LoadIdxDataset(dir_, DatasetSplit::kTrain, cache);
  ASSERT_TRUE(first.ok()) << first.status().message();
  const std::vector<std::string> files = CacheFiles(cache);
  ASSERT_EQ(files.size(), 2u);
  ASSERT_NE(CacheEntry(cache, "train-labels-idx1-ubyte"), "");
  // The cache entry is the raw IDX file, byte for byte.
  std::ifstream entry(CacheEntry(cache, "train-images-idx3-ubyte"), std::ios::binary);
  const std::vector<uint8_t> cached((std::istreambuf_iterator<char>(entry)), {});
  EXPECT_EQ(cached, IdxImages(5, 4, 3));

  Result<Dataset> second = LoadIdxDataset(dir_, DatasetSplit::kTrain, cache);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(Pixels(*second), Pixels(*first));
  EXPECT_EQ(second->labels, first->labels);
  EXPECT_EQ(second->images_path, Path("train-images-idx3-ubyte.gz"));  // messages name the source
  EXPECT_EQ(CacheFiles(cache), files);
}

TEST_F(IdxDatasetTest, ABadCacheEntryIsIgnoredAndWrittenAgain) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  const std::string cache = Path("cache");
  ASSERT_TRUE(LoadIdxDataset(dir_, DatasetSplit::kTrain, cache).ok());
  const std::string images_entry = CacheEntry(cache, "train-images-idx3-ubyte");
  WriteRaw(images_entry, {0, 0, 8, 3, 1});  // truncated
  Result<Dataset> again = LoadIdxDataset(dir_, DatasetSplit::kTrain, cache);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(Pixels(*again).size(), 60u);
  EXPECT_EQ(std::filesystem::file_size(images_entry), IdxImages(5, 4, 3).size());
}

TEST_F(IdxDatasetTest, AChangedSourceIsNotServedFromTheCache) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  const std::string cache = Path("cache");
  ASSERT_TRUE(LoadIdxDataset(dir_, DatasetSplit::kTrain, cache).ok());
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(6, 4, 3));  // other size, other key
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(6));
  Result<Dataset> changed = LoadIdxDataset(dir_, DatasetSplit::kTrain, cache);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_EQ(changed->count, 6);
  EXPECT_EQ(changed->labels.size(), 6u);
}

TEST_F(IdxDatasetTest, AnUnwritableCacheOnlyCostsTheCopy) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  WriteRaw(Path("not-a-folder"), {1});
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain, Path("not-a-folder/cache"));
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->count, 5);
}

TEST_F(IdxDatasetTest, ShapeMustMatchModel) {
  WriteRaw(Path("train-images-idx3-ubyte"), IdxImages(2, 4, 3));
  WriteRaw(Path("train-labels-idx1-ubyte"), IdxLabels(2));
  Result<Dataset> d = LoadIdxDataset(dir_, DatasetSplit::kTrain);
  ASSERT_TRUE(d.ok()) << d.status().message();
  dpl_model_info_v3 info{};
  info.input_ndim = 3;
  info.input_shape[0] = 1;
  info.input_shape[1] = 28;
  info.input_shape[2] = 28;
  info.num_classes = 10;
  Status s = CheckDatasetMatchesModel(*d, info);
  EXPECT_EQ(s.message(), "wrong shape: the model expects samples of shape (1, 28, 28) but " +
                             Path("train-images-idx3-ubyte") +
                             " holds images of 4x3; use a data set that matches the model or "
                             "another --model");
  info.input_shape[1] = 4;
  info.input_shape[2] = 3;
  EXPECT_TRUE(CheckDatasetMatchesModel(*d, info).ok());
  info.num_classes = 1;
  EXPECT_EQ(
      CheckDatasetMatchesModel(*d, info).message(),
      Path("train-labels-idx1-ubyte") + ": label 1 of sample 1 is not below the model's 1 classes");
}

}  // namespace
}  // namespace dpl::training
