// What the webdataset plugin refuses, each refusal naming the shard and the member: broken shards
// (shard_writer.py broken), patterns that match no file, options that do not fit; and a damaged
// index in the data cache, which is rebuilt with a warning rather than refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "webdataset_fixture.hpp"

namespace dpl::datasets::testing {
namespace {

namespace fs = std::filesystem;

class WebDatasetRefusalTest : public WebDatasetFixture {
 protected:
  std::string Shard() const { return Path("train/shard.tar"); }
};

std::string Error(const std::string& message) {
  return WebDatasetError(message);
}

TEST_F(WebDatasetRefusalTest, BrokenShardsAreRefusedNamingTheShardAndTheMember) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"truncated", "",
       ": truncated: member 000.jpg at byte 0 declares 718 bytes of data but the shard ends at "
       "byte 812; copy or write it again"},
      {"unlabelled", "",
       ": sample \"001\" has no label: the shard holds 001.jpg but no member 001.cls (every "
       "sample needs .jpg, .jpeg, .png or .webp and .cls)"},
      {"gzipped", "",
       ": a gzip-compressed shard; a compressed tar cannot be read by offset, so store the shards "
       "uncompressed (gunzip it to a .tar file, or write it with webdataset's ShardWriter to a "
       "name ending in .tar)"},
      {"unreadable-image", "",
       ": member 001.jpg: not a JPEG, PNG or WebP image (it starts with the bytes 47 49 46 38)"},
      {"duplicate-key", "",
       ": sample \"001\" has two input members, 001.jpg (byte 3072) and 001.jpg (byte 5632); keys "
       "must be unique within a shard"},
      {"two-inputs", "",
       ": sample \"001\" has two input members, 001.jpg (byte 3072) and 001.png (byte 5632); name "
       "the one to read, e.g. input=jpg"},
      // Note [A JPEG cut short]: its header is whole, its scan stops; refused at indexing.
      {"truncated-jpeg", "",
       ": member 001.jpg: the JPEG image does not decode: Premature end of JPEG file (its data "
       "stops before its end: write the shard again from a whole copy of the image, or leave the "
       "sample out)"},
      {"label-12", "classes=10",
       ": sample \"001\" (member 001.jpg): its label (.cls) 12 is not below classes=10"},
  };
  for (const auto& [fault, options, message] : cases) {
    SCOPED_TRACE(fault);
    fs::remove_all(Path("train"));
    Writer("broken " + dir_ + " " + fault);
    EXPECT_EQ(Refusal(options), Error(Shard() + message));
  }
  // Without classes=, label 12 makes 13 classes.
  Dataset counted("webdataset", At());
  ASSERT_TRUE(counted.ok()) << counted.error();
  EXPECT_EQ(counted.Info().num_classes, 13);
}

// Note [A JPEG cut short]: bytes after a JPEG's end marker (some cameras append data there)
// decode as Pillow decodes them, and the sample is kept.
TEST_F(WebDatasetRefusalTest, AJpegWithBytesAfterItsEndIsKept) {
  Writer("broken " + dir_ + " trailing-bytes");
  Dataset dataset("webdataset", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const Batch batch = dataset.FillAll();
  ASSERT_EQ(batch.labels, (std::vector<int64_t>{1, 2}));
  const size_t sample = batch.input.size() / 2;
  EXPECT_TRUE(std::equal(batch.input.begin(), batch.input.begin() + long(sample),
                         batch.input.begin() + long(sample)));
}

TEST_F(WebDatasetRefusalTest, PatternsNameTheirShardsAndOneThatMatchesNothingIsRefused) {
  Writer("webdataset " + dir_);
  const std::vector<std::string> patterns = {"train/shard-{000000..000002}.tar", "train/*.tar",
                                             Path("train/shard-00000?.tar")};
  for (const std::string& pattern : patterns) {
    Dataset dataset("webdataset", At("shards=" + pattern));
    ASSERT_TRUE(dataset.ok()) << pattern << ": " << dataset.error();
    EXPECT_EQ(dataset.Info().count, 20) << pattern;
  }
  EXPECT_EQ(Refusal("shards=train/shard-{000000..000003}.tar", DPL_ERR_NOT_FOUND),
            Error("the shard pattern shards=train/shard-{000000..000003}.tar names " +
                  Path("train/shard-000003.tar") +
                  ", which is not a file; check the pattern and --data-dir"));
  EXPECT_EQ(Refusal("shards=train/*.tgz", DPL_ERR_NOT_FOUND),
            Error("the shard pattern shards=train/*.tgz matches no file (" + Path("train/*.tgz") +
                  "); check the pattern and --data-dir"));
  EXPECT_EQ(Refusal("shards=train/shard-{3..1}.tar"),
            Error("the shard pattern \"" + Path("train/shard-{3..1}.tar") +
                  "\" has a malformed brace range; write {FIRST..LAST} of two numbers with "
                  "FIRST <= LAST, e.g. "
                  "train-{000000..000146}.tar"));
  // A link to a shard is one; a link whose target is gone is refused, in a folder or a pattern.
  fs::create_symlink(Path("train/shard-000000.tar"), Path("train/shard-000003.tar"));
  EXPECT_EQ(Dataset("webdataset", At("")).Info().count, 27);
  fs::create_symlink(Path("unmounted/shard-000004.tar"), Path("train/shard-000004.tar"));
  const std::string dangling = Path("train/shard-000004.tar") + " is a symbolic link to " +
                               Path("unmounted/shard-000004.tar") +
                               ", which is not a file (a volume not mounted?); make it reachable, "
                               "or remove the link";
  EXPECT_EQ(Refusal("", DPL_ERR_NOT_FOUND), Error(dangling));
  EXPECT_EQ(Refusal("shards=train/*.tar", DPL_ERR_NOT_FOUND), Error(dangling));
  fs::remove_all(Path("train"));
  EXPECT_EQ(Refusal("", DPL_ERR_NOT_FOUND),
            Error("missing shard folder: " + Path("train") +
                  "; pass --data-dir with a folder holding train/ and val/ folders of .tar "
                  "shards, or --data-options shards=PATTERN"));
}

TEST_F(WebDatasetRefusalTest, OptionsThatDoNotFitAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"size=0",
       "option \"size\" expects S or HxW of 1 to 32768 pixels, e.g. size=224 or "
       "size=224x192, got \"0\""},
      {"scale=0.5", "option \"scale\" needs size=S (the samples' size) as well"},
      {"size=32,scale=0.5:2",
       "option \"scale\" expects LOW:HIGH with 0 < LOW <= HIGH <= 1, got "
       "\"0.5:2\""},
      {"size=224,resize=200",
       "option \"resize\" (the shorter side before the center crop) must "
       "be at least the size's larger side 224 and at most 32768, got 200"},
      {"sample=tokens,size=32", "option \"size\" is for sample=image data"},
      {"block=8", "option \"block\" is for sample=tokens data"},
      {"sample=tokens",
       "option \"block\" (the ids of a sample's input; its target is the next "
       "ones) is required for sample=tokens, 1 to 16777216, got 0"},
      {"label=json",
       "option \"label\" expects cls, another member extension, or json:FIELD (the "
       "integer field of the sample's .json), got \"json\""},
      {"train_crop=center,size=8,colour=1",
       "unknown option \"colour\" in --data-options; known options: "},
  };
  for (const auto& [options, message] : cases) {
    SCOPED_TRACE(options);
    EXPECT_EQ(Refusal(options).rfind(Error(message), 0), 0u) << Refusal(options);
  }
}

// A damaged index file in the data cache is found (its size, its hash) and rebuilt, with a
// warning that names it; the samples are the shard's.
TEST_F(WebDatasetRefusalTest, ADamagedIndexIsRebuiltWithAWarning) {
  Writer("webdataset " + dir_);
  Settings settings = At();
  settings.cache_dir = Path("cache");
  const Batch straight = Dataset("webdataset", settings).FillAll();
  // The index entries of the first two shards.
  std::vector<std::string> entries(2);
  for (const auto& entry : fs::directory_iterator(Path("cache"))) {
    const std::string path = entry.path().string();
    for (size_t s = 0; s < 2; ++s) {
      if (path.find("-webdataset-shard-00000" + std::to_string(s) + ".tar.index") !=
          std::string::npos) {
        entries[s] = path;
      }
    }
  }
  ASSERT_FALSE(entries[0].empty() || entries[1].empty());
  {  // one record's byte changed in place, and another file cut short
    std::fstream damaged(entries[0], std::ios::in | std::ios::out | std::ios::binary);
    damaged.seekp(64 + 20);
    damaged.put('\x7f');
  }
  fs::resize_file(entries[1], fs::file_size(entries[1]) - 10);
  LogLines log;
  settings.log = &log;
  Dataset rebuilt("webdataset", settings);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.error();
  EXPECT_EQ(rebuilt.FillAll().input, straight.input);
  // The shards are indexed on threads of their own, so the warnings come in either order.
  std::vector<std::string> expected = {
      "W: dataset \"webdataset\": the data cache's index " + entries[0] +
          " is damaged (its records do not match their hash); indexing " +
          Path("train/shard-000000.tar") + " again",
      "W: dataset \"webdataset\": the data cache's index " + entries[1] +
          " is damaged (its size does not match its header); indexing " +
          Path("train/shard-000001.tar") + " again"};
  std::vector<std::string> warnings;
  for (const std::string& line : log.lines) {
    if (line.rfind("W: ", 0) == 0) warnings.push_back(line);
  }
  std::sort(warnings.begin(), warnings.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(warnings, expected);
  // Rebuilt entries are whole again: a third open warns of nothing.
  LogLines quiet;
  settings.log = &quiet;
  Dataset again("webdataset", settings);
  for (const std::string& line : quiet.lines) EXPECT_NE(line.rfind("W: ", 0), 0u) << line;
}

}  // namespace
}  // namespace dpl::datasets::testing
