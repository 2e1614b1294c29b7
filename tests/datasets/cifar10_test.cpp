// The cifar10 plugin on CIFAR-10 binary files written here, and the train split's augmentation
// (random crop with zero padding, horizontal flip) against a reference written from the
// documented generator (datasets/common/augment_random.hpp).
#include <gtest/gtest.h>

#include <filesystem>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {

constexpr size_t kRecord = 3073;
constexpr size_t kPixels = 3072;
const float kMean[3] = {0.4914f, 0.4822f, 0.4465f};
const float kStd[3] = {0.2470f, 0.2435f, 0.2616f};

// Record r of the split: label (r * 3) % 10, pixel j = (r * 31 + j * 7) % 256.
std::vector<uint8_t> Records(size_t first, size_t count) {
  std::vector<uint8_t> bytes;
  for (size_t r = first; r < first + count; ++r) {
    bytes.push_back(uint8_t((r * 3) % 10));
    for (size_t j = 0; j < kPixels; ++j) bytes.push_back(uint8_t((r * 31 + j * 7) % 256));
  }
  return bytes;
}

uint8_t Pixel(size_t record, size_t j) {
  return uint8_t((record * 31 + j * 7) % 256);
}

// SplitMix64, and the draws of Note [Augmentation generator], written again from the note.
uint64_t Step(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t Once(uint64_t state) {
  return Step(state);
}

// The augmented, normalised sample `record` of `epoch` as the note and torchvision's
// RandomCrop(32, padding) then RandomHorizontalFlip define it.
std::vector<float> Augmented(size_t record, int64_t epoch, uint64_t seed, int64_t padding) {
  uint64_t state = Once(Once(Once(seed) ^ uint64_t(epoch)) ^ uint64_t(record));
  const int64_t top = int64_t(Step(state) % uint64_t(2 * padding + 1));
  const int64_t left = int64_t(Step(state) % uint64_t(2 * padding + 1));
  const bool flip = (Step(state) >> 63) != 0;
  std::vector<float> out(kPixels);
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < 32; ++y) {
      for (int64_t x = 0; x < 32; ++x) {
        // Padded image P = pad(src, padding); cropped(y, x) = P(y + top, x + left); flipped.
        const int64_t cx = flip ? 31 - x : x;
        const int64_t sy = y + top - padding, sx = cx + left - padding;
        const uint8_t value = (sy >= 0 && sy < 32 && sx >= 0 && sx < 32)
                                  ? Pixel(record, size_t(c * 1024 + sy * 32 + sx))
                                  : 0;
        out[size_t(c * 1024 + y * 32 + x)] = Normalised(value, kMean[c], kStd[c]);
      }
    }
  }
  return out;
}

// Sample `record` normalised with the defaults, not augmented.
std::vector<float> Plain(size_t record) {
  std::vector<float> out(kPixels);
  for (size_t j = 0; j < kPixels; ++j)
    out[j] = Normalised(Pixel(record, j), kMean[j / 1024], kStd[j / 1024]);
  return out;
}

class Cifar10Test : public ScratchTest {
 protected:
  // data_batch_1..5 with 3, 2, 4, 1, 2 records (12 in all), test_batch with 3.
  void WriteSplits(const std::string& folder) {
    const size_t counts[5] = {3, 2, 4, 1, 2};
    size_t first = 0;
    for (int i = 0; i < 5; ++i) {
      WriteBytes(folder + "/data_batch_" + std::to_string(i + 1) + ".bin",
                 Records(first, counts[i]));
      first += counts[i];
    }
    WriteBytes(folder + "/test_batch.bin", Records(100, 3));
  }
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    Dataset dataset("cifar10", settings);
    EXPECT_EQ(dataset.status(), expected) << dataset.error();
    return dataset.error();
  }
};

TEST_F(Cifar10Test, ReadsEveryBatchFileWithTheDefaultNormalisation) {
  WriteSplits(dir_);
  Dataset dataset("cifar10", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(dataset.Info().count, 12);
  EXPECT_EQ(dataset.Info().num_classes, 10);
  const std::vector<int64_t> indices = {11, 0, 5, 9, 3};
  const Batch batch = dataset.Fill(indices);
  for (size_t row = 0; row < indices.size(); ++row) {
    const size_t record = size_t(indices[row]);
    EXPECT_EQ(batch.labels[row], int64_t((record * 3) % 10));
    for (size_t j = 0; j < kPixels; ++j) {
      ASSERT_EQ(batch.input[row * kPixels + j],
                Normalised(Pixel(record, j), kMean[j / 1024], kStd[j / 1024]))
          << row << " " << j;
    }
  }
}

TEST_F(Cifar10Test, ReadsTheArchivesFolderAndTheTestSplitWithOptions) {
  WriteSplits(Path("cifar-10-batches-bin"));
  Settings settings = At("mean=0.5,std=0.5:0.25:0.125,flip=horizontal,crop=4");
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset dataset("cifar10", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().count, 3);
  const Batch batch = dataset.Fill({2}, /*epoch=*/5);  // the test split is never augmented
  const float stds[3] = {0.5f, 0.25f, 0.125f};
  for (size_t j = 0; j < kPixels; ++j) {
    ASSERT_EQ(batch.input[j], Normalised(Pixel(102, j), 0.5f, stds[j / 1024])) << j;
  }
  EXPECT_EQ(batch.labels[0], 6);
}

TEST_F(Cifar10Test, CropAndFlipFollowTheGeneratorOfSeedEpochAndIndex) {
  WriteSplits(dir_);
  Settings settings = At("crop=4,flip=horizontal");
  settings.seed = 42;
  Dataset dataset("cifar10", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const std::vector<int64_t> indices = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  int changed = 0;  // samples the augmentation changed (the seed is fixed, so this is too)
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const Batch batch = dataset.Fill(indices, epoch);
    for (size_t row = 0; row < indices.size(); ++row) {
      const std::vector<float> expected = Augmented(row, epoch, 42, 4);
      ASSERT_TRUE(
          std::equal(expected.begin(), expected.end(), batch.input.begin() + long(row * kPixels)))
          << "sample " << row << " epoch " << epoch;
      changed += expected != Plain(row) ? 1 : 0;
    }
  }
  EXPECT_GT(changed, 18);  // of 36: most draws crop off-centre or flip
}

TEST_F(Cifar10Test, AugmentationIsTheSameWhereverASampleIsReadAndChangesWithTheEpoch) {
  WriteSplits(dir_);
  Settings settings = At("crop=4,flip=horizontal");
  settings.seed = 7;
  Dataset one("cifar10", settings);
  settings.num_threads = 4;
  Dataset other("cifar10", settings);  // another instance, as another rank would have
  ASSERT_TRUE(one.ok() && other.ok()) << one.error() << other.error();
  const Batch alone = one.Fill({5}, 2);
  const Batch among = other.Fill({3, 5, 9}, 2);
  EXPECT_TRUE(std::equal(alone.input.begin(), alone.input.end(), among.input.begin() + kPixels));
  const Batch all_epoch_2 = one.FillAll(2);
  const Batch all_epoch_3 = one.FillAll(3);
  EXPECT_NE(all_epoch_2.input, all_epoch_3.input);
  EXPECT_EQ(all_epoch_2.input, one.FillAll(2).input);
  settings.seed = 8;
  Dataset reseeded("cifar10", settings);
  EXPECT_NE(reseeded.FillAll(2).input, all_epoch_2.input);
}

TEST_F(Cifar10Test, ManyThreadsFillWhatOneFills) {
  WriteBytes(Path("test_batch.bin"), Records(0, 300));  // enough for several threads
  Settings settings = At();
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset one("cifar10", settings);
  settings.num_threads = 3;
  Dataset three("cifar10", settings);
  ASSERT_TRUE(one.ok() && three.ok()) << one.error() << three.error();
  const Batch a = one.FillAll(), b = three.FillAll();
  EXPECT_EQ(a.input, b.input);
  EXPECT_EQ(a.labels, b.labels);
}

TEST_F(Cifar10Test, MissingFiles) {
  EXPECT_EQ(Refusal(At(), DPL_ERR_NOT_FOUND),
            "dataset \"cifar10\": missing data file: looked for " + Path("data_batch_1.bin") +
                " and " + Path("cifar-10-batches-bin/data_batch_1.bin") +
                "; pass --data-dir with the folder holding the CIFAR-10 binary version "
                "(cifar-10-batches-bin)");
  WriteSplits(dir_);
  std::filesystem::remove(Path("data_batch_3.bin"));
  EXPECT_EQ(Refusal(At(), DPL_ERR_NOT_FOUND),
            "dataset \"cifar10\": missing data file: " + Path("data_batch_3.bin") +
                " (the split is data_batch_1.bin .. data_batch_5.bin)");
}

TEST_F(Cifar10Test, BadFiles) {
  WriteSplits(dir_);
  std::vector<uint8_t> records = Records(0, 2);
  records.resize(records.size() - 5);
  WriteBytes(Path("data_batch_2.bin"), records);
  EXPECT_EQ(Refusal(At()), "dataset \"cifar10\": " + Path("data_batch_2.bin") +
                               ": not a whole number of records: its 6141 bytes are 1 record of "
                               "3073 bytes (a label byte and 3x32x32 pixels) and 3068 bytes more "
                               "(a copy cut short, or bytes added to it); download the set again");
  records = Records(0, 2);
  records.push_back(0);  // one byte added: not "truncated"
  WriteBytes(Path("data_batch_2.bin"), records);
  EXPECT_EQ(Refusal(At()), "dataset \"cifar10\": " + Path("data_batch_2.bin") +
                               ": not a whole number of records: its 6147 bytes are 2 records of "
                               "3073 bytes (a label byte and 3x32x32 pixels) and 1 byte more (a "
                               "copy cut short, or bytes added to it); download the set again");
  WriteBytes(Path("data_batch_2.bin"), {});
  EXPECT_EQ(Refusal(At()),
            "dataset \"cifar10\": " + Path("data_batch_2.bin") + ": holds no records");
  records = Records(0, 2);
  records[kRecord] = 57;
  WriteBytes(Path("data_batch_2.bin"), records);
  EXPECT_EQ(Refusal(At()), "dataset \"cifar10\": " + Path("data_batch_2.bin") +
                               ": label 57 of record 1 is not a CIFAR-10 class (0..9); is this "
                               "the CIFAR-100 binary version?");
}

TEST_F(Cifar10Test, OptionValues) {
  WriteSplits(dir_);
  EXPECT_EQ(Refusal(At("mean=0.5:0.5")),
            "dataset \"cifar10\": option \"mean\" has 2 values but the samples of " + dir_ +
                " have 3 channels; give one value, or one per channel");
  EXPECT_EQ(Refusal(At("std=0.5:0:0.5")),
            "dataset \"cifar10\": option \"std\" values must be positive, got \"0.5:0:0.5\"");
  EXPECT_EQ(Refusal(At("mean=0.5;0.5")),
            "dataset \"cifar10\": option \"mean\" expects numbers separated by ':' (e.g. "
            "mean=0.5:0.5:0.5), got \"0.5;0.5\"");
  EXPECT_EQ(Refusal(At("mean=0.5:")),
            "dataset \"cifar10\": option \"mean\" expects numbers separated by ':' (e.g. "
            "mean=0.5:0.5:0.5), got \"0.5:\"");
  EXPECT_EQ(Refusal(At("flip=vertical")),
            "dataset \"cifar10\": option \"flip\" must be one of none|horizontal, got "
            "\"vertical\"");
  EXPECT_EQ(Refusal(At("crop=-1")),
            "dataset \"cifar10\": option \"crop\" expects a padding of 0 to 4096 pixels, got -1");
  EXPECT_EQ(Refusal(At("classes=10")),
            "dataset \"cifar10\": unknown option \"classes\" in --data-options; known options: "
            "mean, std, flip, crop");
}

}  // namespace
}  // namespace dpl::datasets::testing
