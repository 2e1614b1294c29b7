// The tokens plugin on token files the tests write (raw little-endian ids as nanoGPT writes them,
// and .npy arrays through dpl's Python (torch, numpy, ...)): windows and their targets exactly, the
// window grid of each epoch, the count, every dtype, the vocabulary, and every refusal.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {

// Ids as little-endian integers of T (x86-64 is little-endian), as numpy's tofile writes them.
template <typename T>
void WriteIds(const std::string& path, const std::vector<T>& ids) {
  std::vector<uint8_t> bytes(ids.size() * sizeof(T));
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  WriteBytes(path, bytes);
}

// first, first + 1, ..., first + count - 1 as uint16.
std::vector<uint16_t> Ramp(int count, int first = 0) {
  std::vector<uint16_t> ids(size_t(count), 0);
  for (int i = 0; i < count; ++i) ids[size_t(i)] = uint16_t(first + i);
  return ids;
}

class TokensTest : public ScratchTest {
 protected:
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    return CreateError("tokens", settings, expected);
  }
  std::string Error(const std::string& message) const { return "dataset \"tokens\": " + message; }

  // The offset of `epoch`: where sample 0 of the train split starts, for ids that equal their
  // position. Checks every sample of the epoch against it: input i, target i + 1, inside the file.
  int64_t OffsetOf(const Dataset& dataset, int64_t epoch, int64_t tokens) const {
    const dpl_dataset_info_v2 info = dataset.Info();
    const int64_t block = info.input.shape[0];
    std::vector<int64_t> indices(size_t(info.count));
    for (size_t i = 0; i < indices.size(); ++i) indices[i] = int64_t(i);
    const TokenBatch batch = dataset.FillTokens(indices, epoch);
    const int64_t offset = batch.input[0];
    for (int64_t i = 0; i < info.count; ++i) {
      for (int64_t j = 0; j < block; ++j) {
        const size_t at = size_t(i * block + j);
        EXPECT_EQ(batch.input[at], offset + i * block + j) << "epoch " << epoch << " sample " << i;
        EXPECT_EQ(batch.target[at], offset + i * block + j + 1);
      }
    }
    EXPECT_LE(offset + info.count * block + 1, tokens) << "a window past the end";
    return offset;
  }
};

TEST_F(TokensTest, ValidationWindowsAndTargetsExactly) {
  WriteIds(Path("train.bin"), Ramp(50));
  WriteIds(Path("val.bin"), Ramp(30, 100));
  Dataset dataset("tokens", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=4"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const dpl_dataset_info_v2 info = dataset.Info();
  EXPECT_EQ(info.input.dtype.code, kDLInt);
  EXPECT_EQ(info.input.dtype.bits, 64);
  EXPECT_EQ(ShapeOf(info.input), (std::vector<int64_t>{4}));
  EXPECT_EQ(info.target.dtype.code, kDLInt);
  EXPECT_EQ(info.target.dtype.bits, 64);
  EXPECT_EQ(ShapeOf(info.target), (std::vector<int64_t>{4}));
  EXPECT_EQ(info.count, 7);          // (30 - 1) / 4 windows at offset 0
  EXPECT_EQ(info.num_classes, 130);  // the largest id of both files + 1
  const TokenBatch batch = dataset.FillTokens({6, 0, 3}, /*epoch=*/5);
  EXPECT_EQ(batch.input,
            (std::vector<int64_t>{124, 125, 126, 127, 100, 101, 102, 103, 112, 113, 114, 115}));
  EXPECT_EQ(batch.target,
            (std::vector<int64_t>{125, 126, 127, 128, 101, 102, 103, 104, 113, 114, 115, 116}));
  // The test split reads val.bin too, on the same fixed grid.
  Dataset test("tokens", AtSplit(DPL_DATASET_SPLIT_TEST, "block=4"));
  ASSERT_TRUE(test.ok()) << test.error();
  EXPECT_EQ(test.FillTokens({6, 0, 3}, 9).input, batch.input);
}

TEST_F(TokensTest, TheTrainGridShiftsPerEpochAlikeOnEveryRank) {
  WriteIds(Path("train.bin"), Ramp(1000));
  WriteIds(Path("val.bin"), Ramp(20));
  Dataset rank0("tokens", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=16", 7));
  Settings other = AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=16", 7);
  other.num_threads = 3;
  Dataset rank1("tokens", other);
  Dataset reseeded("tokens", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=16", 8));
  ASSERT_TRUE(rank0.ok() && rank1.ok() && reseeded.ok()) << rank0.error();
  // (1000 - 1) / 16 = 62 windows fit at offset 0; one is kept as room for every offset.
  EXPECT_EQ(rank0.Info().count, 61);
  std::set<int64_t> offsets;
  std::vector<int64_t> sequence, reseeded_sequence;
  for (int64_t epoch = 0; epoch < 16; ++epoch) {
    const int64_t offset = OffsetOf(rank0, epoch, 1000);
    EXPECT_GE(offset, 0);
    EXPECT_LT(offset, 16);
    EXPECT_EQ(OffsetOf(rank1, epoch, 1000), offset) << "epoch " << epoch;
    EXPECT_EQ(OffsetOf(rank0, epoch, 1000), offset) << "epoch " << epoch << " again";
    EXPECT_EQ(rank0.Info().count, 61);
    offsets.insert(offset);
    sequence.push_back(offset);
    reseeded_sequence.push_back(OffsetOf(reseeded, epoch, 1000));
  }
  EXPECT_GE(offsets.size(), 4u) << "the grid hardly moves across 16 epochs";
  EXPECT_NE(sequence, reseeded_sequence) << "the seed does not change the offsets";
}

TEST_F(TokensTest, TheCountIsWhatEveryOffsetCanServe) {
  struct Case {
    int tokens, block;
    int64_t train, validation;
  };
  // 9 = one window exactly (offset 0 only); 12: one window, offsets 0..3; 17: two windows at
  // offset 0, one kept for the train split with offsets 0..7.
  for (const Case& c : {Case{9, 8, 1, 1}, Case{12, 8, 1, 1}, Case{17, 8, 1, 2}, Case{33, 8, 3, 4},
                        Case{2, 1, 1, 1}, Case{3, 1, 1, 2}}) {
    SCOPED_TRACE(std::to_string(c.tokens) + " tokens, block " + std::to_string(c.block));
    WriteIds(Path("train.bin"), Ramp(c.tokens));
    WriteIds(Path("val.bin"), Ramp(c.tokens));
    const std::string options = "block=" + std::to_string(c.block);
    Dataset train("tokens", AtSplit(DPL_DATASET_SPLIT_TRAIN, options, 3));
    Dataset validation("tokens", AtSplit(DPL_DATASET_SPLIT_VALIDATION, options));
    ASSERT_TRUE(train.ok()) << train.error();
    ASSERT_TRUE(validation.ok()) << validation.error();
    EXPECT_EQ(train.Info().count, c.train);
    EXPECT_EQ(validation.Info().count, c.validation);
    std::set<int64_t> offsets;
    for (int64_t epoch = 0; epoch < 200; ++epoch) offsets.insert(OffsetOf(train, epoch, c.tokens));
    const int64_t room = c.tokens - 1 - c.train * c.block;  // the largest offset that fits
    EXPECT_EQ(int64_t(offsets.size()), std::min<int64_t>(c.block, room + 1));
    EXPECT_EQ(OffsetOf(validation, 4, c.tokens), 0);
  }
}

TEST_F(TokensTest, Uint32FilesWithDtypeUint32) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 21; ++i) ids.push_back(70000 + i * 1000);
  WriteIds(Path("train.bin"), ids);
  WriteIds(Path("val.bin"), std::vector<uint32_t>(ids.begin(), ids.begin() + 11));
  Dataset dataset("tokens", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=5,dtype=uint32"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().num_classes, 90001);
  const TokenBatch batch = dataset.FillTokens({1});
  EXPECT_EQ(batch.input, (std::vector<int64_t>{75000, 76000, 77000, 78000, 79000}));
  EXPECT_EQ(batch.target, (std::vector<int64_t>{76000, 77000, 78000, 79000, 80000}));
  Dataset given("tokens", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=5,dtype=uint32,vocab=100000"));
  ASSERT_TRUE(given.ok()) << given.error();
  EXPECT_EQ(given.Info().num_classes, 100000);
}

// nanoGPT's uint16 ids read as uint32: pairs of ids become ids in the millions. An inferred
// vocabulary above 2^22 is refused, naming the dtype; vocab= keeps it.
TEST_F(TokensTest, UInt16IdsReadAsUint32AreRefusedByTheirVocabulary) {
  std::vector<uint16_t> ids = Ramp(40, 100);
  WriteIds(Path("train.bin"), ids);
  WriteIds(Path("val.bin"), ids);
  const uint32_t largest = 139u << 16 | 138u;  // the last pair, little-endian
  EXPECT_EQ(Refusal(At("block=4,dtype=uint32")),
            Error(Path("train.bin") + ": the largest token id read as uint32 is " +
                  std::to_string(largest) + ", a vocabulary of " + std::to_string(largest + 1) +
                  ", above the 4194304 that no tokenizer reaches: are the ids read with the wrong "
                  "dtype? nanoGPT's train.bin holds uint16 (dtype=uint16, the default for .bin); "
                  "give vocab=N to train on this vocabulary anyway"));
  Dataset as_uint16("tokens", At("block=4"));
  ASSERT_TRUE(as_uint16.ok()) << as_uint16.error();
  EXPECT_EQ(as_uint16.Info().num_classes, 140);
  Dataset given("tokens", At("block=4,dtype=uint32,vocab=" + std::to_string(largest + 1)));
  ASSERT_TRUE(given.ok()) << given.error();
  EXPECT_EQ(given.Info().num_classes, int64_t(largest) + 1);
}

TEST_F(TokensTest, NpyFilesOfEveryIntegerDtype) {
  for (const std::string dtype :
       {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}) {
    SCOPED_TRACE(dtype);
    RunPython(dir_, "numpy.save('train.npy', (numpy.arange(40) % 97 + 3).astype(numpy." + dtype +
                        "))\nnumpy.save('val.npy', numpy.array([5, 9, 2, 7, 1, 0, 8], "
                        "dtype=numpy." +
                        dtype + "))\n");
    Dataset dataset("tokens", AtSplit(DPL_DATASET_SPLIT_VALIDATION, "block=3"));
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    EXPECT_EQ(dataset.Info().count, 2);
    EXPECT_EQ(dataset.Info().num_classes, 43);  // train's largest, 42, + 1
    const TokenBatch batch = dataset.FillTokens({0, 1});
    EXPECT_EQ(batch.input, (std::vector<int64_t>{5, 9, 2, 7, 1, 0}));
    EXPECT_EQ(batch.target, (std::vector<int64_t>{9, 2, 7, 1, 0, 8}));
  }
}

TEST_F(TokensTest, TheVocabularyIsTheLargestIdOfBothFilesOrVocab) {
  std::vector<uint16_t> train = Ramp(20), val = Ramp(10);
  train[3] = 40;
  val[9] = 50;
  WriteIds(Path("train.bin"), train);
  WriteIds(Path("val.bin"), val);
  for (const int32_t split : {int32_t{DPL_DATASET_SPLIT_TRAIN}, DPL_DATASET_SPLIT_VALIDATION}) {
    Dataset inferred("tokens", AtSplit(split, "block=2"));
    ASSERT_TRUE(inferred.ok()) << inferred.error();
    EXPECT_EQ(inferred.Info().num_classes, 51) << "split " << split;
    Dataset given("tokens", AtSplit(split, "block=2,vocab=64"));
    ASSERT_TRUE(given.ok()) << given.error();
    EXPECT_EQ(given.Info().num_classes, 64);
  }
  // Without val.bin the train split alone gives the vocabulary.
  std::filesystem::remove(Path("val.bin"));
  Dataset alone("tokens", AtSplit(DPL_DATASET_SPLIT_TRAIN, "block=2"));
  ASSERT_TRUE(alone.ok()) << alone.error();
  EXPECT_EQ(alone.Info().num_classes, 41);
}

TEST_F(TokensTest, RefusesBadFiles) {
  WriteIds(Path("val.bin"), Ramp(40));
  WriteBytes(Path("train.bin"), std::vector<uint8_t>(201, 1));
  EXPECT_EQ(Refusal(At("block=4")),
            Error(Path("train.bin") +
                  ": 201 bytes, not a whole number of uint16 tokens (2 bytes each); a truncated "
                  "file, or not uint16 (dtype=uint32 reads 4-byte ids)"));
  WriteBytes(Path("train.bin"), std::vector<uint8_t>(202, 1));
  EXPECT_EQ(Refusal(At("block=4,dtype=uint32")),
            Error(Path("train.bin") +
                  ": 202 bytes, not a whole number of uint32 tokens (4 bytes each); a truncated "
                  "file, or not uint32"));
  std::vector<uint16_t> ids = Ramp(40);
  ids[37] = 50;
  WriteIds(Path("train.bin"), ids);
  EXPECT_EQ(Refusal(At("block=4,vocab=50")),
            Error(Path("train.bin") + ": token 50 at position 37 is not below vocab=50"));
  WriteIds(Path("train.bin"), Ramp(4));
  EXPECT_EQ(Refusal(At("block=4")),
            Error(Path("train.bin") +
                  ": 4 tokens, shorter than one sample (block=4 takes 5 tokens); use a smaller "
                  "block or more data"));
  WriteBytes(Path("train.bin"), {});
  EXPECT_EQ(Refusal(At("block=4")), Error(Path("train.bin") + ": the file is empty (no tokens)"));
  std::filesystem::remove(Path("train.bin"));
  EXPECT_EQ(
      Refusal(At("block=4"), DPL_ERR_NOT_FOUND),
      Error("missing data file: looked for " + Path("train.bin") + " and " + Path("train.npy") +
            "; pass --data-dir with the folder holding train.bin and val.bin (or train.npy "
            "and val.npy)"));
  Settings validation = At("block=4");
  validation.split = DPL_DATASET_SPLIT_VALIDATION;
  std::filesystem::remove(Path("val.bin"));
  EXPECT_EQ(Refusal(validation, DPL_ERR_NOT_FOUND),
            Error("missing data file: looked for " + Path("val.bin") + " and " + Path("val.npy") +
                  "; pass --data-dir with the folder holding train.bin and val.bin (or train.npy "
                  "and val.npy)"));
}

TEST_F(TokensTest, RefusesBadNpyFiles) {
  WriteIds(Path("val.bin"), Ramp(40));
  RunPython(dir_, "numpy.save('train.npy', numpy.arange(12).reshape(3, 4))\n");
  EXPECT_EQ(
      Refusal(At("block=4")),
      Error(Path("train.npy") + ": shape (3, 4) is not 1-D; save the tokens as one flat array "
                                "(numpy.save(path, ids.reshape(-1)))"));
  RunPython(dir_, "numpy.save('train.npy', numpy.arange(12, dtype=numpy.float32))\n");
  EXPECT_EQ(Refusal(At("block=4")),
            Error(Path("train.npy") +
                  ": dtype '<f4' is not read for token ids (uint8 '|u1', int8 '|i1', uint16 "
                  "'<u2', int16 '<i2', uint32 '<u4', int32 '<i4', uint64 '<u8' or int64 '<i8'); "
                  "convert it (ids.astype(numpy.uint16))"));
  RunPython(dir_, "numpy.save('train.npy', numpy.array([], dtype=numpy.uint16))\n");
  EXPECT_EQ(Refusal(At("block=4")), Error(Path("train.npy") + ": holds no tokens (shape (0,))"));
  RunPython(dir_,
            "a = numpy.arange(12, dtype=numpy.int16)\na[9] = -3\nnumpy.save('train.npy', a)\n");
  EXPECT_EQ(Refusal(At("block=4")),
            Error(Path("train.npy") + ": token -3 at position 9 is negative"));
  EXPECT_EQ(Refusal(At("block=4,dtype=uint16")),
            Error("option \"dtype\" applies to .bin files; " + Path("train.npy") +
                  " names its dtype in its header; drop dtype="));
  WriteIds(Path("train.bin"), Ramp(40));
  EXPECT_EQ(Refusal(At("block=4")), Error("both " + Path("train.bin") + " and " +
                                          Path("train.npy") + " exist; keep the one to train on"));
}

TEST_F(TokensTest, RefusesBadOptions) {
  WriteIds(Path("train.bin"), Ramp(40));
  WriteIds(Path("val.bin"), Ramp(40));
  EXPECT_EQ(Refusal(At("")),
            Error("option \"block\" is required: the tokens of one sample's input, as the "
                  "model's context (e.g. --data-options block=256)"));
  EXPECT_EQ(Refusal(At("block=0")), Error("option \"block\" must be in 1..16777216, got 0"));
  EXPECT_EQ(Refusal(At("block=x")), Error("option \"block\" expects an integer, got \"x\""));
  EXPECT_EQ(Refusal(At("block=4,vocab=0")), Error("option \"vocab\" must be at least 1, got 0"));
  EXPECT_EQ(Refusal(At("block=4,dtype=int8")),
            Error("option \"dtype\" must be one of uint16|uint32, got \"int8\""));
  EXPECT_EQ(Refusal(At("block=4,mean=0.5")),
            Error("unknown option \"mean\" in --data-options; known options: block, vocab, dtype"));
}

TEST_F(TokensTest, FillWritesInt64Only) {
  WriteIds(Path("train.bin"), Ramp(40));
  WriteIds(Path("val.bin"), Ramp(40));
  Dataset dataset("tokens", At("block=4"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  Batch floats;
  std::string error;
  EXPECT_EQ(dataset.TryFill({0}, 0, &floats, &error), DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(error, Error("input has dtype float32; fill writes int64"));
  std::vector<int64_t> input(4), target(1);
  EXPECT_EQ(dataset.TryFillInto({0}, 0, {kDLInt, 64, 1}, input.data(), {kDLInt, 32, 1},
                                target.data(), &error),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(error, Error("target has dtype int32; fill writes int64"));
}

}  // namespace
}  // namespace dpl::datasets::testing
