// The text plugin on text files the tests write: bytes as tokens, one file split by val_fraction,
// the data cache written once, read by later opens and rebuilt when the text changes, and every
// refusal.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {

// `size` letters that do not repeat with a short period (an LCG), ending in a newline.
std::string Letters(size_t size, uint32_t seed = 1) {
  std::string text;
  for (size_t i = 0; i + 1 < size; ++i) {
    seed = seed * 1664525u + 1013904223u;
    text += char('a' + (seed >> 24) % 26);
  }
  return text + "\n";
}

void WriteText(const std::string& path, const std::string& text) {
  WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<int64_t> Tokens(const std::string& text, size_t begin, size_t count) {
  std::vector<int64_t> tokens;
  for (size_t i = begin; i < begin + count; ++i) tokens.push_back(uint8_t(text[i]));
  return tokens;
}

class TextTest : public ScratchTest {
 protected:
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    return CreateError("text", settings, expected);
  }
  std::string Error(const std::string& message) const { return "dataset \"text\": " + message; }

  // Checks that the samples of `dataset` in `epoch` are the windows of `text`[begin, end) on one
  // grid; returns the grid's offset from `begin`.
  int64_t GridOffset(const Dataset& dataset, int64_t epoch, const std::string& text, size_t begin,
                     size_t end) const {
    const dpl_dataset_info_v2 info = dataset.Info();
    const int64_t block = info.input.shape[0];
    std::vector<int64_t> indices(size_t(info.count));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
    const TokenBatch batch = dataset.FillTokens(indices, epoch);
    int64_t offset = 0;
    while (offset < block &&
           Tokens(text, begin + size_t(offset), size_t(block)) !=
               std::vector<int64_t>(batch.input.begin(), batch.input.begin() + block)) {
      ++offset;
    }
    EXPECT_LT(offset, block) << "sample 0 is no window near the start of the part";
    EXPECT_LE(begin + size_t(offset + info.count * block + 1), end) << "a window past the part";
    for (int64_t i = 0; i < info.count; ++i) {
      const size_t start = begin + size_t(offset + i * block);
      const auto row = batch.input.begin() + i * block;
      EXPECT_EQ(std::vector<int64_t>(row, row + block), Tokens(text, start, size_t(block)));
      const auto next = batch.target.begin() + i * block;
      EXPECT_EQ(std::vector<int64_t>(next, next + block), Tokens(text, start + 1, size_t(block)));
    }
    return offset;
  }

  std::vector<std::string> CacheEntries() const {
    std::vector<std::string> entries;
    for (const auto& entry : std::filesystem::directory_iterator(Path("cache"))) {
      entries.push_back(entry.path().filename().string());
    }
    std::sort(entries.begin(), entries.end());
    return entries;
  }
};

TEST_F(TextTest, BytesAreTokensInAVocabularyOf256) {
  const std::string train = "Grüße aus Köln, 東京 and ASCII: the quick brown fox.\n";
  const std::string val = "naïve café — déjà vu.\n";
  WriteText(Path("train.txt"), train);
  WriteText(Path("val.txt"), val);
  Dataset dataset("text", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=4"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const dpl_dataset_info_v2 info = dataset.Info();
  EXPECT_EQ(info.num_classes, 256);
  EXPECT_EQ(info.input.dtype.code, kDLInt);
  EXPECT_EQ(info.input.dtype.bits, 64);
  EXPECT_EQ(ShapeOf(info.input), (std::vector<int64_t>{4}));
  EXPECT_EQ(ShapeOf(info.target), (std::vector<int64_t>{4}));
  EXPECT_EQ(info.count, int64_t((val.size() - 1) / 4));
  const TokenBatch batch = dataset.FillTokens({0, 1});
  EXPECT_EQ(batch.input, (std::vector<int64_t>{'n', 'a', 0xC3, 0xAF, 'v', 'e', ' ', 'c'}));
  EXPECT_EQ(batch.target, (std::vector<int64_t>{'a', 0xC3, 0xAF, 'v', 'e', ' ', 'c', 'a'}));
  EXPECT_EQ(GridOffset(dataset, 3, val, 0, val.size()), 0);
  Dataset training("text", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=4"));
  ASSERT_TRUE(training.ok()) << training.error();
  EXPECT_EQ(training.Info().count, int64_t((train.size() - 1) / 4 - 1));
  GridOffset(training, 0, train, 0, train.size());
}

TEST_F(TextTest, OneFileIsSplitByValFraction) {
  const std::string text = Letters(1000);
  WriteText(Path("input.txt"), text);
  Dataset validation("text", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=8"));
  Dataset train("text", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=8"));
  ASSERT_TRUE(validation.ok()) << validation.error();
  ASSERT_TRUE(train.ok()) << train.error();
  EXPECT_EQ(validation.Info().count, 12);  // (100 - 1) / 8
  EXPECT_EQ(GridOffset(validation, 0, text, 900, 1000), 0);
  EXPECT_EQ(train.Info().count, 111);  // (900 - 1) / 8 - 1
  for (int64_t epoch = 0; epoch < 4; ++epoch) GridOffset(train, epoch, text, 0, 900);
  // val_fraction=0.25, and --data-dir naming the file itself.
  Settings file = AtSplit(DPL_DATASET_SPLIT_TEST, "block=8,val_fraction=0.25");
  file.path = Path("input.txt");
  Dataset quarter("text", file);
  ASSERT_TRUE(quarter.ok()) << quarter.error();
  EXPECT_EQ(quarter.Info().count, 31);  // (250 - 1) / 8
  EXPECT_EQ(GridOffset(quarter, 0, text, 750, 1000), 0);
}

TEST_F(TextTest, TheCutKeepsACharacterWhole) {
  std::string text = Letters(1000);
  text.replace(899, 2, "\xc3\xa9");  // é across the cut at 900
  WriteText(Path("input.txt"), text);
  Dataset validation("text", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=4"));
  ASSERT_TRUE(validation.ok()) << validation.error();
  EXPECT_EQ(validation.Info().count, 25);  // (101 - 1) / 4
  EXPECT_EQ(validation.FillTokens({0}).input[0], 0xC3);
  GridOffset(validation, 0, text, 899, 1000);
}

TEST_F(TextTest, TheCacheIsWrittenOnceReadLaterAndRebuiltWhenTheTextChanges) {
  const std::string text = Letters(500);
  WriteText(Path("input.txt"), text);
  LogLines log;
  Settings settings = AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=8");
  settings.cache_dir = Path("cache");
  settings.log = &log;
  {
    Dataset first("text", settings);
    ASSERT_TRUE(first.ok()) << first.error();
  }
  ASSERT_EQ(CacheEntries().size(), 1u);
  const std::string entry = Path("cache") + "/" + CacheEntries()[0];
  EXPECT_NE(entry.find("-text-train.tokens"), std::string::npos) << entry;
  EXPECT_EQ(log.lines,
            (std::vector<std::string>{"I: dataset \"text\": wrote the 450 byte tokens of " +
                                      Path("input.txt") +
                                      " (its train part, val_fraction=0.1) to the data "
                                      "cache: " +
                                      entry}));
  EXPECT_EQ(std::filesystem::file_size(entry), 24u + 450u);
  struct stat written {};
  ASSERT_EQ(::stat(entry.c_str(), &written), 0);
  // A later open of the same text serves the cached tokens: no line, the entry untouched.
  log.lines.clear();
  {
    Dataset cached("text", settings);
    ASSERT_TRUE(cached.ok()) << cached.error();
    GridOffset(cached, 1, text, 0, 450);
  }
  EXPECT_TRUE(log.lines.empty()) << log.lines[0];
  struct stat reread {};
  ASSERT_EQ(::stat(entry.c_str(), &reread), 0);
  EXPECT_EQ(reread.st_ino, written.st_ino);
  EXPECT_EQ(reread.st_mtim.tv_nsec, written.st_mtim.tv_nsec);
  EXPECT_EQ(reread.st_mtim.tv_sec, written.st_mtim.tv_sec);
  // Other bytes of the same size given the old time (cp -p, touch -r): its change time keys a new
  // entry.
  struct stat source {};
  ASSERT_EQ(::stat(Path("input.txt").c_str(), &source), 0);
  const std::string other = Letters(500, 99);
  WriteText(Path("input.txt"), other);
  const timespec times[2] = {source.st_atim, source.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, Path("input.txt").c_str(), times, 0), 0);
  {
    Dataset rewritten("text", settings);
    ASSERT_TRUE(rewritten.ok()) << rewritten.error();
    GridOffset(rewritten, 0, other, 0, 450);
  }
  EXPECT_EQ(CacheEntries().size(), 2u);
  // A changed text keys a new entry.
  const std::string longer = Letters(600, 5);
  WriteText(Path("input.txt"), longer);
  Dataset changed("text", settings);
  ASSERT_TRUE(changed.ok()) << changed.error();
  GridOffset(changed, 0, longer, 0, 540);
  EXPECT_EQ(CacheEntries().size(), 3u);
  EXPECT_EQ(log.lines.size(), 2u);
}

TEST_F(TextTest, ABadCacheEntryIsReplaced) {
  const std::string text = Letters(300);
  WriteText(Path("val.txt"), text);
  WriteText(Path("train.txt"), Letters(300, 2));
  LogLines log;
  Settings settings = AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=8");
  settings.cache_dir = Path("cache");
  settings.log = &log;
  { Dataset first("text", settings); }
  ASSERT_EQ(CacheEntries().size(), 1u);
  const std::string entry = Path("cache") + "/" + CacheEntries()[0];
  EXPECT_NE(entry.find("-text-val.tokens"), std::string::npos) << entry;
  std::filesystem::resize_file(entry, 100);
  log.lines.clear();
  Dataset again("text", settings);
  ASSERT_TRUE(again.ok()) << again.error();
  GridOffset(again, 0, text, 0, 300);
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_EQ(log.lines[0], "W: dataset \"text\": ignoring the data cache entry " + entry +
                              " (not the entry of this text); reading the text again");
  EXPECT_EQ(std::filesystem::file_size(entry), 24u + 300u);
}

TEST_F(TextTest, RefusesWhatIsNotText) {
  WriteText(Path("train.txt"), Letters(100));
  auto refusal = [&](const std::string& val) {
    WriteText(Path("val.txt"), val);
    return Refusal(AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=4"));
  };
  auto not_utf8 = [&](const char* byte, size_t offset, int line) {
    return Error(Path("val.txt") + ": not UTF-8 text: byte " + byte + " at offset " +
                 std::to_string(offset) + " (line " + std::to_string(line) +
                 ") is not valid UTF-8; --data text reads text, --data tokens reads token ids");
  };
  EXPECT_EQ(refusal("ok\nbad \xff here\n"), not_utf8("0xff", 7, 2));
  EXPECT_EQ(refusal("overlong \xc0\xaf slash"), not_utf8("0xc0", 9, 1));
  EXPECT_EQ(refusal("a\nb\nsurrogate \xed\xa0\x80"), not_utf8("0xa0", 15, 3));
  EXPECT_EQ(refusal("ends inside \xe2\x82"), not_utf8("0xe2", 12, 1));
  EXPECT_EQ(refusal("lone \x80 continuation"), not_utf8("0x80", 5, 1));
  EXPECT_EQ(refusal(""), Error(Path("val.txt") + ": the file is empty (no text)"));
  EXPECT_EQ(refusal("abc"),
            Error(Path("val.txt") + ": 3 tokens, shorter than one sample (block=4 takes 5 tokens); "
                                    "use a smaller block or more data"));
}

TEST_F(TextTest, RefusesMissingTextAndBadOptions) {
  const std::string missing = "no text to read at " + dir_ + ": looked for " + Path("train.txt") +
                              " and " + Path("val.txt") +
                              ", or one .txt file to split by val_fraction";
  const std::string pass =
      "; pass --data-dir with a text file or the folder holding train.txt and val.txt";
  EXPECT_EQ(Refusal(At("block=4"), DPL_ERR_NOT_FOUND), Error(missing + pass));
  WriteText(Path("a.txt"), Letters(100));
  WriteText(Path("b.txt"), Letters(100));
  EXPECT_EQ(Refusal(At("block=4"), DPL_ERR_NOT_FOUND),
            Error(missing + " (found 2 .txt files: a.txt, b.txt)" + pass));
  WriteText(Path("input.txt"), Letters(100));
  std::filesystem::remove(Path("a.txt"));
  std::filesystem::remove(Path("b.txt"));
  EXPECT_EQ(Refusal(AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=16")),
            Error(Path("input.txt") +
                  " (its validation part, val_fraction=0.1): 10 tokens, shorter than one sample "
                  "(block=16 takes 17 tokens); use a smaller block or more data"));
  // The fraction as given, not rounded to a value the option refuses.
  EXPECT_EQ(Refusal(At("block=4,val_fraction=0.9999999")),
            Error(Path("input.txt") +
                  " (its train part, val_fraction=0.9999999): 0 tokens, shorter than one sample "
                  "(block=4 takes 5 tokens); use a smaller block or more data"));
  EXPECT_EQ(Refusal(At("block=4,val_fraction=1.5")),
            Error("option \"val_fraction\" must be above 0 and below 1, got 1.5"));
  EXPECT_EQ(Refusal(At("block=4,val_fraction=0")),
            Error("option \"val_fraction\" must be above 0 and below 1, got 0"));
  EXPECT_EQ(Refusal(At("block=4,vocab=300")),
            Error("unknown option \"vocab\" in --data-options; known options: block, "
                  "val_fraction"));
  EXPECT_EQ(Refusal(At("val_fraction=0.2")),
            Error("option \"block\" is required: the tokens of one sample's input, as the "
                  "model's context (e.g. --data-options block=256)"));
  WriteText(Path("train.txt"), Letters(100));
  WriteText(Path("val.txt"), Letters(100));
  EXPECT_EQ(Refusal(At("block=4,val_fraction=0.2")),
            Error("option \"val_fraction\" splits one text file, but " + dir_ +
                  " holds train.txt and val.txt; drop val_fraction="));
}

}  // namespace
}  // namespace dpl::datasets::testing
