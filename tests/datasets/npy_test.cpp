// The npy plugin on files numpy.save writes (dpl's Python (torch, numpy, ...)): every dtype read
// back as written, the three format versions, and every refusal.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {

class NpyTest : public ScratchTest {
 protected:
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    Dataset dataset("npy", settings);
    EXPECT_EQ(dataset.status(), expected) << dataset.error();
    return dataset.error();
  }
  // Writes x.npy and y.npy from Python expressions (numpy as `numpy`), and x's raw bytes to x.raw.
  void Write(const std::string& x, const std::string& y, const std::string& version = "(1, 0)",
             const std::string& x_name = "x", const std::string& y_name = "y") {
    RunPython(dir_,
              "from numpy.lib import format\n"
              "x = " +
                  x + "\ny = " + y +
                  "\n"
                  "for name, array in (('" +
                  x_name + "', x), ('" + y_name +
                  "', y)):\n"
                  "    with open(name + '.npy', 'wb') as f:\n"
                  "        format.write_array(f, array, version=" +
                  version +
                  ")\n"
                  "open('x.raw', 'wb').write(numpy.ascontiguousarray(x).tobytes())\n");
  }
  std::string Error(const std::string& file, const std::string& message) {
    return "dataset \"npy\": " + Path(file) + ": " + message;
  }
};

template <typename T>
std::vector<T> Raw(const std::string& path) {
  const std::vector<uint8_t> bytes = ReadBytes(path);
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

TEST_F(NpyTest, Float32SamplesOfAnyShapeAreReadAsWritten) {
  Write("(numpy.arange(4 * 3 * 2 * 5, dtype=numpy.float32) * 0.37 - 5).reshape(4, 3, 2, 5)",
        "numpy.array([3, 0, 7, 1], dtype=numpy.int64)");
  Dataset dataset("npy", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{3, 2, 5}));
  EXPECT_EQ(dataset.Info().count, 4);
  EXPECT_EQ(dataset.Info().num_classes, 8);
  const Batch batch = dataset.FillAll();
  EXPECT_EQ(batch.input, Raw<float>(Path("x.raw")));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{3, 0, 7, 1}));
}

TEST_F(NpyTest, Uint8IsScaledThenNormalisedPerChannel) {
  Write("(numpy.arange(5 * 2 * 3 * 3) * 11 % 256).astype(numpy.uint8).reshape(5, 2, 3, 3)",
        "numpy.arange(5, dtype=numpy.uint8)", "(2, 0)");
  Dataset dataset("npy", At("mean=0.5:0.25,std=0.2:0.4"));
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const Batch batch = dataset.FillAll();
  const std::vector<uint8_t> raw = ReadBytes(Path("x.raw"));
  ASSERT_EQ(batch.input.size(), raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const bool second_channel = (i % 18) >= 9;
    EXPECT_EQ(batch.input[i],
              Normalised(raw[i], second_channel ? 0.25f : 0.5f, second_channel ? 0.4f : 0.2f))
        << i;
  }
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_F(NpyTest, Int64SamplesAreValuesAndInt32LabelsAreRead) {
  Write("numpy.array([[1, -2, 3], [40000000, 5, -6]], dtype=numpy.int64)",
        "numpy.array([1, 0], dtype=numpy.int32)", "(3, 0)", "x_test", "y_test");
  Settings settings = At("classes=4");
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset dataset("npy", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().num_classes, 4);
  const Batch batch = dataset.Fill({1, 0});
  EXPECT_EQ(batch.input, (std::vector<float>{40000000.0f, 5, -6, 1, -2, 3}));
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{0, 1}));
}

TEST_F(NpyTest, MissingFile) {
  EXPECT_EQ(Refusal(At(), DPL_ERR_NOT_FOUND),
            "dataset \"npy\": missing data file: " + Path("x.npy") +
                "; pass --data-dir with the folder holding x.npy and y.npy (x_test.npy and "
                "y_test.npy for the test split)");
}

TEST_F(NpyTest, DtypesThatAreNotRead) {
  Write("numpy.zeros((2, 3))", "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "dtype '<f8' is not read for samples (uint8 '|u1', "
                                 "float32 '<f4' or int64 '<i8'); convert it "
                                 "(x.astype(numpy.float32))"));
  Write("numpy.zeros((2, 3), dtype='>f4')", "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "dtype '>f4' is big-endian; save it little-endian "
                                 "(x.astype(numpy.float32))"));
  Write("numpy.zeros((2, 3), dtype=numpy.float32)", "numpy.zeros(2, dtype=numpy.float32)");
  EXPECT_EQ(Refusal(At()), Error("y.npy",
                                 "dtype '<f4' is not read for labels (int64 '<i8', "
                                 "int32 '<i4' or uint8 '|u1'); convert it "
                                 "(y.astype(numpy.int64))"));
  Write("numpy.zeros(2, dtype=[('a', numpy.float32)])", "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()),
            Error("x.npy",
                  "bad .npy header: a structured dtype is not read; save a plain array "
                  "of numbers in \"{'descr': [('a', '<f4')], 'fortran_order': False, "
                  "'shape': (2,), }\""));
}

TEST_F(NpyTest, FortranOrderIsRefused) {
  Write("numpy.asfortranarray(numpy.zeros((2, 3), dtype=numpy.float32))",
        "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "the array is in Fortran order; save it in C order "
                                 "(numpy.save(path, numpy.ascontiguousarray(array)))"));
}

TEST_F(NpyTest, ShapesAndCounts) {
  Write("numpy.zeros(3, dtype=numpy.float32)", "numpy.zeros(3, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "shape (3) has no sample axes; x must have shape (N, "
                                 "...) with at least 2 axes (x.reshape(-1, 1) for "
                                 "samples of one value)"));
  Write("numpy.zeros((3, 2), dtype=numpy.float32)", "numpy.zeros(4, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), "dataset \"npy\": sample count mismatch: " + Path("x.npy") +
                               " holds 3 samples but " + Path("y.npy") + " holds 4 labels");
  Write("numpy.zeros((3, 2), dtype=numpy.float32)", "numpy.zeros((3, 1), dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("y.npy",
                                 "labels have shape (3, 1); y must hold one label per "
                                 "sample, shape (N,) (y.reshape(-1))"));
  Write("numpy.zeros((0, 2), dtype=numpy.float32)", "numpy.zeros(0, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy", "holds no samples (shape (0, 2))"));
  Write("numpy.zeros((2, 0), dtype=numpy.float32)", "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy", "shape (2, 0) has an empty axis"));
  Write("numpy.zeros((2,) + (1,) * 9, dtype=numpy.uint8)", "numpy.zeros(2, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "samples of shape (2, 1, 1, 1, 1, 1, 1, 1, 1, 1) have "
                                 "9 axes, more than the 8 a dataset sample may have"));
}

// The test files are checked against the training files the model is built for, and a mismatch
// is said of them (the host would blame the model).
TEST_F(NpyTest, TheTestSplitIsCheckedAgainstTheTrainingSplit) {
  Write("numpy.zeros((4, 10), dtype=numpy.float32)", "numpy.array([0, 1, 2, 1])");
  Write("numpy.zeros((2, 10), dtype=numpy.float32)", "numpy.array([0, 50])", "(1, 0)", "x_test",
        "y_test");
  const Settings test = AtSplit(DPL_DATASET_SPLIT_TEST, "");
  EXPECT_EQ(Refusal(test),
            Error("y_test.npy", "label 50 is not below the 3 classes of " + Path("y.npy") +
                                    ", which the model is built for (classes=N "
                                    "counts both splits' labels)"));
  Dataset declared("npy", AtSplit(DPL_DATASET_SPLIT_TEST, "classes=51"));
  EXPECT_TRUE(declared.ok()) << declared.error();
  Write("numpy.zeros((2, 12), dtype=numpy.float32)", "numpy.array([0, 1])", "(1, 0)", "x_test",
        "y_test");
  EXPECT_EQ(Refusal(test), Error("x_test.npy", "samples of shape (12), but " + Path("x.npy") +
                                                   "'s, which the model is built for, are (10)"));
  Write("numpy.zeros((2, 10), dtype=numpy.float32)", "numpy.array([0, 2])", "(1, 0)", "x_test",
        "y_test");
  Dataset fine("npy", test);
  EXPECT_TRUE(fine.ok()) << fine.error();
}

TEST_F(NpyTest, LabelsOutOfRange) {
  Write("numpy.zeros((3, 2), dtype=numpy.float32)", "numpy.array([0, -1, 2])");
  EXPECT_EQ(Refusal(At()), Error("y.npy", "label -1 of sample 1 is negative"));
  Write("numpy.zeros((3, 2), dtype=numpy.float32)", "numpy.array([0, 9, 2])");
  EXPECT_EQ(Refusal(At("classes=5")), Error("y.npy", "label 9 of sample 1 is not below classes=5"));
}

TEST_F(NpyTest, BrokenFiles) {
  Write("numpy.arange(6, dtype=numpy.float32).reshape(3, 2)", "numpy.zeros(3, dtype=numpy.int64)");
  std::vector<uint8_t> x = ReadBytes(Path("x.npy"));
  const size_t data_offset = x.size() - 24;
  auto write_x = [&](std::vector<uint8_t> bytes) { WriteBytes(Path("x.npy"), bytes); };

  write_x(std::vector<uint8_t>(x.begin(), x.end() - 4));
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "truncated: the header declares shape (3, 2) of '<f4' "
                                 "(24 bytes of data) but 20 bytes follow it"));
  std::vector<uint8_t> longer = x;
  longer.push_back(0);
  write_x(longer);
  EXPECT_EQ(Refusal(At()), Error("x.npy",
                                 "1 bytes follow the data the header declares, shape "
                                 "(3, 2) of '<f4' (24 bytes of data); numpy.save writes "
                                 "none"));
  write_x({'P', 'K', 3, 4});
  EXPECT_EQ(Refusal(At()), Error("x.npy", "not a .npy file (it does not start with \\x93NUMPY)"));
  write_x(std::vector<uint8_t>(x.begin(), x.begin() + 7));
  EXPECT_EQ(Refusal(At()), Error("x.npy", "truncated: 7 bytes, shorter than the .npy preamble"));
  write_x(std::vector<uint8_t>(x.begin(), x.begin() + 40));
  EXPECT_EQ(Refusal(At()),
            Error("x.npy", "truncated: the header is " + std::to_string(data_offset - 10) +
                               " bytes long but only 30 bytes follow the preamble"));
  std::vector<uint8_t> version = x;
  version[6] = 4;
  write_x(version);
  EXPECT_EQ(Refusal(At()),
            Error("x.npy", ".npy format version 4.0 is not read (versions 1.0, 2.0 and 3.0 are)"));
  std::vector<uint8_t> header = x;
  const std::string text(x.begin() + 10, x.begin() + long(data_offset));
  const size_t shape = text.find("'shape'");
  header[10 + shape + 1] = 'S';
  write_x(header);
  std::string shown = text.substr(0, text.find_last_not_of(" \n") + 1);
  shown[shape + 1] = 'S';
  EXPECT_EQ(Refusal(At()),
            Error("x.npy", "bad .npy header: unknown key 'Shape' in \"" + shown + "\""));
}

TEST_F(NpyTest, AFileTruncatedUnderTheRunFailsTheFillInsteadOfCrashing) {
  Write("numpy.arange(6, dtype=numpy.float32).reshape(3, 2)", "numpy.zeros(3, dtype=numpy.int64)");
  Dataset dataset("npy", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const uintmax_t size = std::filesystem::file_size(Path("x.npy"));
  std::filesystem::resize_file(Path("x.npy"), 64);
  Batch batch;
  std::string error;
  EXPECT_EQ(dataset.TryFill({2}, 0, &batch, &error), DPL_ERR_IO);
  EXPECT_EQ(error,
            Error("x.npy", "the file changed while it was being read (" + std::to_string(size) +
                               " bytes when opened, 64 now); restart the job on data that "
                               "stays put"));
}

TEST_F(NpyTest, AugmentationNeedsImageShapedSamples) {
  Write("numpy.zeros((3, 5), dtype=numpy.float32)", "numpy.zeros(3, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At("crop=2")),
            "dataset \"npy\": option \"crop\" needs samples with a height and a width (2 or more "
            "axes), but the samples of " +
                Path("x.npy") + " have shape (5)");
  Write("numpy.zeros((3, 2, 4, 4), dtype=numpy.float32)", "numpy.zeros(3, dtype=numpy.int64)");
  EXPECT_EQ(Refusal(At("mean=0:0:0")),
            "dataset \"npy\": option \"mean\" has 3 values but the samples of " + Path("x.npy") +
                " have 2 channels; give one value, or one per channel");
  Dataset flipped("npy", At("flip=horizontal,crop=1"));
  EXPECT_TRUE(flipped.ok()) << flipped.error();
}

}  // namespace
}  // namespace dpl::datasets::testing
