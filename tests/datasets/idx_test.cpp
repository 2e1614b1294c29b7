// The idx plugin: MNIST-format files, gzipped or raw, the data cache and every refusal.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "dataset_loader.hpp"
#include "support/idx_writer.hpp"

namespace dpl::datasets::testing {
using ::dpl::testing::IdxImages;
using ::dpl::testing::IdxLabels;
using ::dpl::testing::WriteGz;
namespace {

class IdxTest : public ScratchTest {
 protected:
  // The message of a refused create, checking its status too.
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    Dataset dataset("idx", settings);
    EXPECT_EQ(dataset.status(), expected) << dataset.error();
    return dataset.error();
  }
};

TEST_F(IdxTest, ReadsGzippedFilesAndNormalisesAsTheRecipe) {
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  Dataset dataset("idx", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{1, 4, 3}));
  EXPECT_EQ(dataset.Info().count, 5);
  EXPECT_EQ(dataset.Info().num_classes, 5);  // labels 0..4
  const Batch batch = dataset.Fill({4, 0, 2});
  const int64_t order[] = {4, 0, 2};
  for (size_t row = 0; row < 3; ++row) {
    for (size_t e = 0; e < 12; ++e) {
      const size_t pixel = size_t(order[row]) * 12 + e;
      EXPECT_EQ(batch.input[row * 12 + e], Normalised(uint8_t((pixel * 7) % 256), 0.1302f, 0.3069f))
          << row << " " << e;
    }
  }
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{4, 0, 2}));
}

TEST_F(IdxTest, ReadsRawFilesOfTheTestSplitWithOptions) {
  WriteBytes(Path("t10k-images-idx3-ubyte"), IdxImages(3, 2, 2));
  WriteBytes(Path("t10k-labels-idx1-ubyte"), IdxLabels(3));
  Settings settings = At("mean=0.5,std=0.25,classes=10");
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset dataset("idx", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().count, 3);
  EXPECT_EQ(dataset.Info().num_classes, 10);
  const Batch batch = dataset.Fill({1});
  for (size_t e = 0; e < 4; ++e) {
    EXPECT_EQ(batch.input[e], Normalised(uint8_t(((4 + e) * 7) % 256), 0.5f, 0.25f));
  }
}

TEST_F(IdxTest, MissingFileNamesBothCandidates) {
  EXPECT_EQ(Refusal(At(), DPL_ERR_NOT_FOUND),
            "dataset \"idx\": missing data file: looked for " + Path("train-images-idx3-ubyte.gz") +
                " and " + Path("train-images-idx3-ubyte") +
                "; pass --data-dir with the folder holding the MNIST-format files");
}

TEST_F(IdxTest, WrongMagic) {
  WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(2, 2, 2, 0x00000801));
  WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(2));
  EXPECT_EQ(Refusal(At()), "dataset \"idx\": " + Path("train-images-idx3-ubyte") +
                               ": wrong magic number 0x00000801, expected 0x00000803 (IDX "
                               "unsigned-byte images)");
  WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(2, 2, 2));
  WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(2, 10, 0x12345678));
  EXPECT_EQ(Refusal(At()), "dataset \"idx\": " + Path("train-labels-idx1-ubyte") +
                               ": wrong magic number 0x12345678, expected 0x00000801 (IDX "
                               "unsigned-byte labels)");
}

TEST_F(IdxTest, Truncated) {
  std::vector<uint8_t> images = IdxImages(4, 2, 2);
  images.resize(images.size() - 3);
  WriteGz(Path("train-images-idx3-ubyte.gz"), images);
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(4));
  EXPECT_EQ(Refusal(At()), "dataset \"idx\": " + Path("train-images-idx3-ubyte.gz") +
                               ": truncated: the header declares 4 images of 2x2 (16 bytes) but "
                               "only 13 bytes of pixels follow");
  std::filesystem::remove(Path("train-images-idx3-ubyte.gz"));
  WriteBytes(Path("train-images-idx3-ubyte"), {0, 0, 8});
  EXPECT_EQ(Refusal(At()), "dataset \"idx\": " + Path("train-images-idx3-ubyte") +
                               ": truncated: 3 bytes, shorter than the 16-byte IDX image header");
  WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(4, 2, 2));
  std::vector<uint8_t> labels = IdxLabels(4);
  labels.pop_back();
  WriteGz(Path("train-labels-idx1-ubyte.gz"), labels);
  EXPECT_EQ(Refusal(At()), "dataset \"idx\": " + Path("train-labels-idx1-ubyte.gz") +
                               ": truncated: the header declares 4 labels but only 3 bytes of "
                               "labels follow");
}

TEST_F(IdxTest, CountMismatchAndLabelRange) {
  WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(4, 2, 2));
  WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(5));
  EXPECT_EQ(Refusal(At()),
            "dataset \"idx\": image/label count mismatch: " + Path("train-images-idx3-ubyte") +
                " holds 4 images but " + Path("train-labels-idx1-ubyte") + " holds 5 labels");
  WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(4));
  EXPECT_EQ(Refusal(At("classes=3")), "dataset \"idx\": " + Path("train-labels-idx1-ubyte") +
                                          ": label 3 of sample 3 is not below classes=3");
  EXPECT_EQ(Refusal(At("classes=0")),
            "dataset \"idx\": option \"classes\" must be at least 1, got 0");
  WriteBytes(Path("train-images-idx3-ubyte"), IdxImages(0, 2, 2));
  WriteBytes(Path("train-labels-idx1-ubyte"), IdxLabels(0));
  EXPECT_EQ(Refusal(At()),
            "dataset \"idx\": " + Path("train-images-idx3-ubyte") + ": holds no images");
}

TEST_F(IdxTest, UnknownOptionIsRefusedBeforeAnyFileIsRead) {
  EXPECT_EQ(Refusal(At("mean=0.1,colour=red")),
            "dataset \"idx\": unknown option \"colour\" in --data-options; known options: mean, "
            "std, flip, crop, classes");
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

// The cache entry whose name ends in "-<base_name>" (names start with a hash of the key).
std::string CacheEntry(const std::string& directory, const std::string& base_name) {
  for (const std::string& name : CacheFiles(directory)) {
    const std::string suffix = "-" + base_name;
    if (name.size() == 16 + suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return directory + "/" + name;
    }
  }
  return "";
}

class IdxCacheTest : public IdxTest {
 protected:
  void SetUp() override {
    IdxTest::SetUp();
    WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(5, 4, 3));
    WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(5));
  }
  Settings Cached() {
    Settings settings = At();
    settings.cache_dir = Path("cache/nested");  // created on first use
    settings.log = &log_;
    return settings;
  }
  LogLines log_;
};

TEST_F(IdxCacheTest, HoldsTheInflatedFilesAndServesTheNextOpen) {
  Batch first;
  {
    Dataset dataset("idx", Cached());
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    first = dataset.FillAll();
  }
  const std::string cache = Cached().cache_dir;
  ASSERT_EQ(CacheFiles(cache).size(), 2u);
  ASSERT_NE(CacheEntry(cache, "train-labels-idx1-ubyte"), "");
  const std::string images_entry = CacheEntry(cache, "train-images-idx3-ubyte");
  EXPECT_EQ(ReadBytes(images_entry), IdxImages(5, 4, 3));  // the raw IDX file, byte for byte
  // A valid entry with other pixels: the next open serves them, so it read the cache.
  std::vector<uint8_t> edited = IdxImages(5, 4, 3);
  edited[16] = 255;
  WriteBytes(images_entry, edited);
  Dataset again("idx", Cached());
  ASSERT_TRUE(again.ok()) << again.error();
  const Batch second = again.FillAll();
  EXPECT_EQ(second.input[0], Normalised(255, 0.1302f, 0.3069f));
  EXPECT_TRUE(std::equal(second.input.begin() + 1, second.input.end(), first.input.begin() + 1));
  EXPECT_EQ(second.labels, first.labels);
  EXPECT_TRUE(log_.lines.empty());
}

// An idx set has train and test files only: its validation split is the test files, and it says
// so (--eval-every, --export-best and --early-stop-patience select on them).
TEST_F(IdxCacheTest, TheValidationSplitIsTheTestFilesAndSaysSo) {
  WriteGz(Path("t10k-images-idx3-ubyte.gz"), IdxImages(3, 4, 3));
  WriteGz(Path("t10k-labels-idx1-ubyte.gz"), IdxLabels(3));
  Settings settings = Cached();
  settings.split = DPL_DATASET_SPLIT_VALIDATION;
  Dataset dataset("idx", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  ASSERT_EQ(log_.lines.size(), 1u);
  EXPECT_EQ(log_.lines[0], "I: dataset \"idx\": the validation split is the test files (" +
                               Path("t10k-images-idx3-ubyte.gz") +
                               "): idx data has no validation part of its own");
}

// 64-bit FNV-1a (the published algorithm, http://www.isthe.com/chongo/tech/comp/fnv/).
uint64_t Fnv1a64(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : text) hash = (hash ^ uint8_t(c)) * 0x100000001b3ull;
  return hash;
}

// Note [Data cache]: an entry is named by a hash that does not depend on the C++ library, of the
// key "<canonical path>|<size>|<seconds>.<nanoseconds>" of its source.
TEST_F(IdxCacheTest, EntryNamesAreTheStableHashOfTheSourceKey) {
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);  // the algorithm's own test vector
  { Dataset dataset("idx", Cached()); }
  const std::string source = Path("train-images-idx3-ubyte.gz");
  struct stat info {};
  ASSERT_EQ(::stat(source.c_str(), &info), 0);
  const std::string key =
      std::filesystem::canonical(source).string() + "|" + std::to_string(info.st_size) + "|" +
      std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + "|" +
      std::to_string(info.st_ctim.tv_sec) + "." + std::to_string(info.st_ctim.tv_nsec);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(Fnv1a64(key)));
  EXPECT_EQ(CacheEntry(Cached().cache_dir, "train-images-idx3-ubyte"),
            Cached().cache_dir + "/" + hash + "-train-images-idx3-ubyte");
}

TEST_F(IdxCacheTest, ABadEntryIsIgnoredWithAWarningAndWrittenAgain) {
  { Dataset dataset("idx", Cached()); }
  const std::string images_entry = CacheEntry(Cached().cache_dir, "train-images-idx3-ubyte");
  WriteBytes(images_entry, {0, 0, 8, 3, 1});  // truncated
  Dataset again("idx", Cached());
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again.FillAll().input[1], Normalised(7, 0.1302f, 0.3069f));
  EXPECT_EQ(ReadBytes(images_entry), IdxImages(5, 4, 3));
  ASSERT_EQ(log_.lines.size(), 1u);
  EXPECT_EQ(log_.lines[0], "W: dataset \"idx\": ignoring the data cache entry " + images_entry +
                               " (" + Path("train-images-idx3-ubyte.gz") +
                               ": truncated: 5 bytes, shorter than the 16-byte IDX image "
                               "header); reading " +
                               Path("train-images-idx3-ubyte.gz") + " again");
}

TEST_F(IdxCacheTest, AChangedSourceIsNotServedFromTheCache) {
  { Dataset dataset("idx", Cached()); }
  WriteGz(Path("train-images-idx3-ubyte.gz"), IdxImages(6, 4, 3));  // other size, other key
  WriteGz(Path("train-labels-idx1-ubyte.gz"), IdxLabels(6));
  Dataset changed("idx", Cached());
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_EQ(changed.Info().count, 6);
  EXPECT_EQ(CacheFiles(Cached().cache_dir).size(), 4u);
}

TEST_F(IdxCacheTest, AnUnwritableCacheOnlyCostsTheCopy) {
  WriteBytes(Path("not-a-folder"), {1});
  Settings settings = Cached();
  settings.cache_dir = Path("not-a-folder/cache");
  Dataset dataset("idx", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().count, 5);
  ASSERT_EQ(log_.lines.size(), 2u);
  EXPECT_EQ(log_.lines[0], "W: dataset \"idx\": data cache: cannot create " + Path("not-a-folder") +
                               "/cache: Not a directory; training goes on, the next run inflates "
                               "the data again (--data-cache none turns the cache off)");
}

}  // namespace
}  // namespace dpl::datasets::testing
