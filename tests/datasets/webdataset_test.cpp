// The webdataset plugin on shards written by the webdataset package (its ShardWriter), by GNU tar
// and by Python's tarfile in the pax and ustar formats (shard_writer.py), against PIL's decoding
// and torchvision's crops; the refusals of broken shards; the index in the data cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <tuple>

#include "webdataset_fixture.hpp"

namespace dpl::datasets::testing {
namespace {

namespace fs = std::filesystem;

class WebDatasetTest : public WebDatasetFixture {
 protected:
  std::vector<std::string> CacheEntries() const {
    std::vector<std::string> names;
    if (!fs::exists(Path("cache"))) return names;
    for (const auto& entry : fs::directory_iterator(Path("cache"))) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }
};

// A batch of (C, H, W) samples written with mean 0 and std 1 (every value is byte / 255) back as
// bytes, in `layout` "HWC" or "CHW".
std::vector<uint8_t> AsBytes(const Batch& batch, const std::vector<int64_t>& shape,
                             const std::string& layout) {
  const int64_t channels = shape[0], plane = shape[1] * shape[2];
  std::vector<uint8_t> bytes(batch.input.size());
  for (size_t sample = 0; sample < batch.labels.size(); ++sample) {
    const float* in = batch.input.data() + sample * size_t(channels * plane);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = 0; p < plane; ++p) {
        const float value = in[c * plane + p];
        const long byte = std::lround(value * 255.0f);
        EXPECT_EQ(value, Normalised(uint8_t(byte), 0.0f, 1.0f));
        const size_t at = layout == "HWC" ? size_t(p * channels + c) : size_t(c * plane + p);
        bytes[sample * size_t(channels * plane) + at] = uint8_t(byte);
      }
    }
  }
  return bytes;
}

std::vector<int64_t> LabelsOf(const std::string& listing) {
  std::ifstream in(listing);
  std::vector<int64_t> labels;
  std::string key;
  int64_t label;
  while (in >> key >> label) labels.push_back(label);
  return labels;
}

TEST_F(WebDatasetTest, ReadsEverySampleOfShardsTheWebdatasetPackageWrote) {
  Writer("webdataset " + dir_);
  const std::vector<std::tuple<int32_t, std::string, int64_t>> splits = {
      {DPL_DATASET_SPLIT_TRAIN, "train", 20},
      {DPL_DATASET_SPLIT_VALIDATION, "val", 6},
      {DPL_DATASET_SPLIT_TEST, "val", 6}};
  for (const auto& [split, name, count] : splits) {
    SCOPED_TRACE(name);
    for (const std::string options : {"", "label=json:label,threads=2"}) {
      SCOPED_TRACE(options);
      Dataset dataset("webdataset", Split(split, options));
      ASSERT_TRUE(dataset.ok()) << dataset.error();
      const dpl_dataset_info_v2 info = dataset.Info();
      EXPECT_EQ(ShapeOf(info.input), (std::vector<int64_t>{3, 12, 16}));
      EXPECT_EQ(info.input.dtype.code, kDLFloat);
      EXPECT_EQ(ShapeOf(info.target), std::vector<int64_t>{});
      EXPECT_EQ(info.count, count);
      EXPECT_EQ(info.num_classes, 5);
      const Batch batch = dataset.FillAll();
      // PNG, JPEG and lossless WebP decode to PIL's pixels exactly.
      EXPECT_TRUE(AsBytes(batch, {3, 12, 16}, "HWC") ==
                  ReadBytes(Path("reference-" + name + ".raw")));
      EXPECT_EQ(batch.labels, LabelsOf(Path("reference-" + name + ".txt")));
    }
  }
  // One index file a shard (3 train shards of 7, 7, 6 samples and 1 val shard) and layout (the
  // .cls or the .json label), written once and read by later opens.
  const std::vector<std::string> entries = CacheEntries();
  ASSERT_EQ(entries.size(), 8u);
  std::vector<fs::file_time_type> written;
  for (const std::string& entry : entries) {
    EXPECT_NE(entry.find("-webdataset-shard-00000"), std::string::npos) << entry;
    EXPECT_EQ(entry.substr(entry.size() - 6), ".index") << entry;
    written.push_back(fs::last_write_time(Path("cache/" + entry)));
  }
  Dataset again("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
  ASSERT_TRUE(again.ok()) << again.error();
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(fs::last_write_time(Path("cache/" + entries[i])), written[i]) << entries[i];
  }
}

// Several opens at once (as several launchers sharing a cache) each build or read whole
// indexes; a shard rewritten under the same name is indexed anew, its old entry left unread.
TEST_F(WebDatasetTest, ConcurrentOpensShareTheCacheAndAChangedShardIsIndexedAgain) {
  Writer("webdataset " + dir_);
  std::vector<Batch> batches(4);
  std::vector<std::thread> opens;
  for (size_t i = 0; i < batches.size(); ++i) {
    opens.emplace_back([&, i] {
      Dataset dataset("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
      if (dataset.ok()) batches[i] = dataset.FillAll();
    });
  }
  for (std::thread& open : opens) open.join();
  for (const Batch& batch : batches) {
    EXPECT_EQ(batch.labels, LabelsOf(Path("reference-train.txt")));
    EXPECT_EQ(batch.input, batches[0].input);
  }
  ASSERT_EQ(CacheEntries().size(), 3u);
  // shard-000000 becomes a copy of shard-000001 (a new size or time: a new key).
  fs::remove(Path("train/shard-000000.tar"));
  fs::copy_file(Path("train/shard-000001.tar"), Path("train/shard-000000.tar"));
  Dataset changed("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_EQ(CacheEntries().size(), 4u);
  const Batch after = changed.FillAll();
  const size_t sample = 3 * 12 * 16;
  EXPECT_TRUE(std::equal(after.input.begin(), after.input.begin() + 7 * sample,
                         batches[0].input.begin() + 7 * sample));
  EXPECT_EQ(std::vector<int64_t>(after.labels.begin(), after.labels.begin() + 7),
            std::vector<int64_t>(batches[0].labels.begin() + 7, batches[0].labels.begin() + 14));
}

// A cache that cannot be written costs each shard its index file, said once for all the shards.
TEST_F(WebDatasetTest, AnUnwritableCacheIsWarnedOfOnceForAllShards) {
  Writer("webdataset " + dir_);
  WriteBytes(Path("not-a-folder"), {1});
  Settings settings = Split(DPL_DATASET_SPLIT_TRAIN);
  settings.cache_dir = Path("not-a-folder/cache");
  LogLines log;
  settings.log = &log;
  Dataset dataset("webdataset", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().count, 20);
  std::vector<std::string> warnings;
  for (const std::string& line : log.lines) {
    if (line.rfind("W: ", 0) == 0) warnings.push_back(line);
  }
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(log.lines);
  EXPECT_NE(warnings[0].find("data cache: cannot create " + Path("not-a-folder")),
            std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find(" (and likewise for 2 more shards); the indexes stay in memory"),
            std::string::npos)
      << warnings[0];
}

TEST_F(WebDatasetTest, ReadsTarsOfGnuTarPaxAndUstarWithLongNamesDotsAndFolders) {
  Writer("formats " + dir_);
  Dataset dataset("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  // The labels say which key each sample is: GNU tar's a/000, b.c/002 (its b.c/002.seg.png is
  // skipped: extension "seg.png", as WebDataset reads it) and the long-named deep/x.../001, pax's
  // long UTF-8 name and v1.2/004, ustar's prefix-field name.
  EXPECT_EQ(dataset.FillAll().labels, (std::vector<int64_t>{0, 2, 1, 3, 4, 5}));
}

TEST_F(WebDatasetTest, EverySampleGetsItsOwnCropWhateverBatchThreadOrRankReadsIt) {
  Writer("sized " + dir_);
  const std::string options = "size=24,flip=horizontal";
  Dataset one_thread("webdataset", Split(DPL_DATASET_SPLIT_TRAIN, options, 11));
  Settings threaded = Split(DPL_DATASET_SPLIT_TRAIN, options, 11);
  threaded.num_threads = 3;
  Dataset three_threads("webdataset", threaded);
  ASSERT_TRUE(one_thread.ok()) << one_thread.error();
  const Batch all = one_thread.FillAll(4);
  const Batch reversed = three_threads.Fill({7, 6, 5, 4, 3, 2, 1, 0}, 4);
  const size_t elements = 3 * 24 * 24;
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_TRUE(std::equal(all.input.begin() + i * elements, all.input.begin() + (i + 1) * elements,
                           reversed.input.begin() + (7 - i) * elements))
        << "sample " << i;
  }
  EXPECT_NE(all.input, one_thread.FillAll(5).input) << "a new epoch draws new crops";
  Dataset other_seed("webdataset", Split(DPL_DATASET_SPLIT_TRAIN, options, 12));
  EXPECT_NE(all.input, other_seed.FillAll(4).input);
}

// RandomResizedCrop (with the flip) and Resize + CenterCrop by torchvision on PIL images, given
// the plugin's draws: the same crop boxes, and pixels within Pillow's resize's rounding (Pillow
// 13 runs the vertical pass first when it shrinks height much more than width; the plugin keeps
// Pillow's classic horizontal-first order, so a value may differ by 1).
TEST_F(WebDatasetTest, CropsAreTorchvisionsForTheSameDraws) {
  Writer("sized " + dir_);
  const std::vector<std::pair<int32_t, std::string>> splits = {
      {DPL_DATASET_SPLIT_TRAIN, "train"}, {DPL_DATASET_SPLIT_VALIDATION, "val"}};
  for (const auto& [split, name] : splits) {
    SCOPED_TRACE(name);
    Writer("torchvision " + dir_ + " " + name + " 32 37 5 3 1");
    Dataset dataset("webdataset", Split(split, "size=32,resize=37,flip=horizontal", 5));
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    const std::vector<uint8_t> ours = AsBytes(dataset.FillAll(3), {3, 32, 32}, "CHW");
    const std::vector<uint8_t> expected = ReadBytes(Path("expected-" + name + ".raw"));
    ASSERT_EQ(ours.size(), expected.size());
    size_t equal = 0;
    int largest = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      const int difference = std::abs(int(ours[i]) - int(expected[i]));
      largest = std::max(largest, difference);
      equal += difference == 0;
    }
    EXPECT_LE(largest, 1);
    EXPECT_GE(double(equal), 0.97 * double(ours.size()));
    std::printf("%s: %zu of %zu values equal torchvision's, the others within %d\n", name.c_str(),
                equal, ours.size(), largest);
  }
}

TEST_F(WebDatasetTest, TokenSamplesAreWindowsOfTheirIds) {
  Writer("tokens " + dir_);
  Dataset dataset("webdataset", Split(DPL_DATASET_SPLIT_TRAIN, "sample=tokens,block=8"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const dpl_dataset_info_v2 info = dataset.Info();
  EXPECT_EQ(ShapeOf(info.input), std::vector<int64_t>{8});
  EXPECT_EQ(info.count, 6);
  std::ifstream listing(Path("expected-tokens.txt"));
  std::vector<std::vector<int64_t>> ids;
  int64_t largest = 0;
  for (std::string line; std::getline(listing, line);) {
    std::istringstream values(line);
    ids.emplace_back(std::istream_iterator<int64_t>(values), std::istream_iterator<int64_t>());
    largest = std::max(largest, *std::max_element(ids.back().begin(), ids.back().end()));
  }
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(info.num_classes, largest + 1);
  const TokenBatch batch = dataset.FillTokens({0, 1, 2, 3, 4, 5});
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(std::vector<int64_t>(batch.input.begin() + i * 8, batch.input.begin() + i * 8 + 8),
              std::vector<int64_t>(ids[i].begin(), ids[i].begin() + 8));
    EXPECT_EQ(std::vector<int64_t>(batch.target.begin() + i * 8, batch.target.begin() + i * 8 + 8),
              std::vector<int64_t>(ids[i].begin() + 1, ids[i].begin() + 9));
  }
  const std::string shard = Path("train/tokens.tar");
  EXPECT_EQ(Refusal(Split(DPL_DATASET_SPLIT_TRAIN, "sample=tokens,block=9")),
            WebDatasetError(
                shard + ": sample \"000\" (member 000.npy): 9 ids; a sample of block=9 needs 10 "
                        "(its input, and the next id after each as the target)"));
  EXPECT_NE(Refusal(Split(DPL_DATASET_SPLIT_TRAIN, "sample=tokens,block=4,vocab=10"))
                .find("is not below vocab=10"),
            std::string::npos);
  // The cached index holds the .bin members read as uint16; as uint32 they are read anew: the
  // ten uint16 ids of 001.bin are five uint32 ones.
  EXPECT_NE(Refusal(Split(DPL_DATASET_SPLIT_TRAIN, "sample=tokens,block=8,dtype=uint32"))
                .find("(member 001.bin): 5 ids"),
            std::string::npos);
}

// A shard rewritten in place with its size and modification time kept (cp -p, touch -r, rsync
// -t) is indexed anew: its change time is part of the key.
TEST_F(WebDatasetTest, AShardRewrittenWithItsSizeAndTimeKeptIsIndexedAgain) {
  Writer("webdataset " + dir_);
  const std::string shard = Path("train/shard-000000.tar");
  Dataset before("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
  ASSERT_TRUE(before.ok()) << before.error();
  const std::vector<int64_t> labels = before.FillAll().labels;
  const auto written = fs::last_write_time(shard);
  std::fstream bytes(shard, std::ios::in | std::ios::out | std::ios::binary);
  std::string tar((std::istreambuf_iterator<char>(bytes)), std::istreambuf_iterator<char>());
  size_t header = 0;  // the first .cls member's header (its name ends there); its text the label
  auto name_of = [&](size_t at) { return std::string(tar.c_str() + at, strnlen(&tar[at], 100)); };
  while (header < tar.size() && !(name_of(header).size() > 4 &&
                                  name_of(header).substr(name_of(header).size() - 4) == ".cls")) {
    header += 512;
  }
  ASSERT_LT(header, tar.size());
  const char label = tar[header + 512];
  ASSERT_TRUE(label >= '0' && label <= '2');
  bytes.seekp(std::streamoff(header + 512));
  bytes.put(char(label + 1));
  bytes.close();
  fs::last_write_time(shard, written);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Dataset after("webdataset", Split(DPL_DATASET_SPLIT_TRAIN));
  ASSERT_TRUE(after.ok()) << after.error();
  EXPECT_NE(after.FillAll().labels, labels);
}

}  // namespace
}  // namespace dpl::datasets::testing
