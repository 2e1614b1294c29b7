// The imagefolder plugin on PNG and JPEG folders written with PIL, against PIL's own decoding,
// conversion and resizing in torchvision's ImageFolder order (image_folder_writer.py).
#include <gtest/gtest.h>
#include <utime.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dataset_loader.hpp"

namespace dpl::datasets::testing {
namespace {

class ImageFolderTest : public ScratchTest {
 protected:
  void Writer(const std::string& arguments) {
    RunPython(dir_, "sys.argv = ['writer'] + '" + arguments +
                        "'.split()\n"
                        "sys.path.insert(0, '" DPL_TEST_SOURCE_DIR
                        "/tests/datasets')\n"
                        "import runpy\n"
                        "runpy.run_path('" DPL_TEST_SOURCE_DIR
                        "/tests/datasets/image_folder_writer.py',"
                        " run_name='__main__')");
  }
  // PIL's pixels of `split` in `mode` ("L" or "RGB"), optionally resized to "HxW".
  struct Reference {
    std::vector<uint8_t> pixels;  // HWC, image after image
    std::vector<int64_t> labels;
    std::vector<std::string> paths;
  };
  Reference PilReference(const std::string& split, const std::string& mode,
                         const std::string& size = "none") {
    const std::string out = Path("reference-" + split + "-" + mode);
    Writer("reference " + dir_ + " " + split + " " + mode + " " + size + " " + out);
    Reference reference;
    reference.pixels = ReadBytes(out + ".raw");
    std::ifstream listing(out + ".txt");
    int64_t label;
    std::string path;
    while (listing >> label >> path) {
      reference.labels.push_back(label);
      reference.paths.push_back(path);
    }
    return reference;
  }
  std::string Refusal(const Settings& settings, dpl_status expected = DPL_ERR_INVALID_ARGUMENT) {
    Dataset dataset("imagefolder", settings);
    EXPECT_EQ(dataset.status(), expected) << dataset.error();
    return dataset.error();
  }
  std::string Error(const std::string& message) { return "dataset \"imagefolder\": " + message; }
};

// The plugin's samples (mean 0, std 1: every value is byte * (1 / 255)) back as HWC bytes.
std::vector<uint8_t> AsPilBytes(const Dataset& dataset, const Batch& batch) {
  const std::vector<int64_t> shape = dataset.SampleShape();
  const int64_t channels = shape[0], plane = shape[1] * shape[2];
  std::vector<uint8_t> bytes(batch.input.size());
  for (size_t sample = 0; sample < batch.labels.size(); ++sample) {
    const float* in = batch.input.data() + sample * size_t(channels * plane);
    for (int64_t p = 0; p < plane; ++p) {
      for (int64_t c = 0; c < channels; ++c) {
        const float value = in[c * plane + p];
        const long byte = std::lround(value * 255.0f);
        EXPECT_EQ(value, Normalised(uint8_t(byte), 0.0f, 1.0f));
        bytes[sample * size_t(channels * plane) + size_t(p * channels + c)] = uint8_t(byte);
      }
    }
  }
  return bytes;
}

TEST_F(ImageFolderTest, DecodesEveryKindOfImageAsPilInImageFoldersOrder) {
  Writer("standard " + dir_);
  for (const std::string mode : {"L", "RGB"}) {
    SCOPED_TRACE(mode);
    // The first image (train/cat/a.png) is grey, so channels default to 1.
    Dataset dataset("imagefolder", At(mode == "L" ? "" : "channels=3"));
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    const Reference reference = PilReference("train", mode);
    EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{mode == "L" ? 1 : 3, 5, 6}));
    EXPECT_EQ(dataset.Info().count, 9);
    EXPECT_EQ(dataset.Info().num_classes, 2);
    const Batch batch = dataset.FillAll();
    EXPECT_EQ(batch.labels, reference.labels);
    EXPECT_EQ(AsPilBytes(dataset, batch), reference.pixels);
  }
}

TEST_F(ImageFolderTest, TheTestSplitHasTheSameClasses) {
  Writer("standard " + dir_);
  Settings settings = At("channels=3,flip=horizontal,crop=2");  // not applied to the test split
  settings.split = DPL_DATASET_SPLIT_TEST;
  Dataset dataset("imagefolder", settings);
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  const Reference reference = PilReference("test", "RGB");
  const Batch batch = dataset.FillAll(4);
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(AsPilBytes(dataset, batch), reference.pixels);
  // ImageNet's layout names it val/: read when there is no test/.
  std::filesystem::rename(Path("test"), Path("val"));
  Dataset from_val("imagefolder", settings);
  ASSERT_TRUE(from_val.ok()) << from_val.error();
  EXPECT_EQ(AsPilBytes(from_val, from_val.FillAll(4)), reference.pixels);
}

TEST_F(ImageFolderTest, ResizeIsPilsBilinearUpAndDown) {
  Writer("sized " + dir_);
  for (const std::string mode : {"L", "RGB"}) {
    SCOPED_TRACE(mode);
    Dataset dataset("imagefolder",
                    At(std::string("resize=7x8,channels=") + (mode == "L" ? "1" : "3")));
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    EXPECT_EQ(dataset.SampleShape(), (std::vector<int64_t>{mode == "L" ? 1 : 3, 7, 8}));
    EXPECT_EQ(AsPilBytes(dataset, dataset.FillAll()), PilReference("train", mode, "7x8").pixels);
  }
}

TEST_F(ImageFolderTest, DecodedPerBatchWhenTheSplitExceedsTheCacheLimit) {
  Writer("standard " + dir_);
  Dataset in_memory("imagefolder", At("channels=3,mean=0.5,std=0.2"));
  Settings settings = At("channels=3,mean=0.5,std=0.2,cache_mb=0");
  settings.num_threads = 3;
  Dataset per_batch("imagefolder", settings);
  ASSERT_TRUE(in_memory.ok() && per_batch.ok()) << in_memory.error() << per_batch.error();
  EXPECT_EQ(per_batch.FillAll().input, in_memory.FillAll().input);
  // An image that stops decoding under the run fails that fill, naming it and the sample.
  WriteBytes(Path("train/dog/s.jpg"), {0xFF, 0xD8, 0xFF, 0xE0, 0, 16});
  Batch batch;
  std::string error;
  EXPECT_EQ(per_batch.TryFill({1, 7}, 0, &batch, &error), DPL_ERR_IO);
  EXPECT_EQ(error, Error(Path("train/dog/s.jpg") +
                         ": the JPEG image does not decode: Premature end of JPEG file (sample 7, "
                         "decoded per batch)"));
}

TEST_F(ImageFolderTest, ManyThreadsDecodeWhatOneDecodesAndReportTheFirstBadImage) {
  Writer("sized " + dir_);
  Settings settings = At("resize=16x16");
  Dataset one("imagefolder", settings);
  settings.num_threads = 4;
  Dataset four("imagefolder", settings);
  ASSERT_TRUE(one.ok() && four.ok()) << one.error() << four.error();
  EXPECT_EQ(one.FillAll().input, four.FillAll().input);
  WriteBytes(Path("train/only/c.png"), {'n', 'o', 'p', 'e'});
  WriteBytes(Path("train/only/e.png"), {'n', 'o', 'p', 'e'});
  EXPECT_EQ(Refusal(settings), Error(Path("train/only/c.png") +
                                     ": not a PNG or JPEG image (it starts with the bytes 6e 6f "
                                     "70 65)"));
}

std::vector<std::string> Entries(const std::string& folder) {
  std::vector<std::string> names;
  if (!std::filesystem::exists(folder)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

TEST_F(ImageFolderTest, TheDecodedSplitIsCachedAndAChangedImageDecodesAgain) {
  Writer("standard " + dir_);
  Settings settings = At("channels=3");
  settings.cache_dir = Path("cache");
  LogLines log;
  settings.log = &log;
  Batch first;
  {
    Dataset dataset("imagefolder", settings);
    ASSERT_TRUE(dataset.ok()) << dataset.error();
    first = dataset.FillAll();
  }
  std::vector<std::string> entries = Entries(settings.cache_dir);
  ASSERT_EQ(entries.size(), 1u);
  ASSERT_EQ(entries[0].substr(16), "-imagefolder-train");
  const std::string entry = settings.cache_dir + "/" + entries[0];
  EXPECT_EQ(std::filesystem::file_size(entry), 48u + 9 * 3 * 5 * 6);
  // An entry with one pixel edited is served as it is: the next open read the cache.
  std::vector<uint8_t> bytes = ReadBytes(entry);
  bytes[48] = uint8_t(bytes[48] ^ 0xFF);
  WriteBytes(entry, bytes);
  {
    Dataset cached("imagefolder", settings);
    ASSERT_TRUE(cached.ok()) << cached.error();
    const Batch served = cached.FillAll();
    EXPECT_NE(served.input[0], first.input[0]);
    EXPECT_TRUE(std::equal(served.input.begin() + 1, served.input.end(), first.input.begin() + 1));
  }
  // A touched image changes the key: decoded again into a second entry.
  struct utimbuf times {
    1000000000, 1000000000
  };
  ASSERT_EQ(::utime(Path("train/dog/q.png").c_str(), &times), 0);
  Dataset changed("imagefolder", settings);
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_EQ(changed.FillAll().input, first.input);
  EXPECT_EQ(Entries(settings.cache_dir).size(), 2u);
  // A bad entry is reported and written again.
  std::string current;
  for (const std::string& name : Entries(settings.cache_dir)) {
    if (name != entries[0]) current = settings.cache_dir + "/" + name;
  }
  WriteBytes(current, {1, 2, 3});
  log.lines.clear();
  Dataset rebuilt("imagefolder", settings);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.error();
  EXPECT_EQ(rebuilt.FillAll().input, first.input);
  EXPECT_EQ(std::filesystem::file_size(current), 48u + 9 * 3 * 5 * 6);
  ASSERT_EQ(log.lines.size(), 2u);
  EXPECT_EQ(log.lines[0], "W: dataset \"imagefolder\": ignoring the data cache entry " + current +
                              " (not the entry of these images); decoding the images again");
  EXPECT_EQ(log.lines[1].rfind(
                "I: dataset \"imagefolder\": decoded 9 images of " + Path("train") + " in ", 0),
            0u);
}

TEST_F(ImageFolderTest, LinksToFilesAndClassFoldersAreFollowedLinksToInnerFoldersAreNot) {
  Writer("standard " + dir_);
  std::filesystem::create_directory_symlink(Path("train/dog"), Path("train/wolf"));
  std::filesystem::create_symlink(Path("train/cat/a.png"), Path("train/dog/link.png"));
  std::filesystem::create_directory_symlink(Path("train/cat/sub"), Path("train/dog/sub"));
  Dataset dataset("imagefolder", At());
  ASSERT_TRUE(dataset.ok()) << dataset.error();
  EXPECT_EQ(dataset.Info().num_classes, 3);
  EXPECT_EQ(dataset.Info().count, 4 + 6 + 6);  // dog gains link.png, not sub/
  const Batch batch = dataset.Fill({0, 4, 10});
  EXPECT_EQ(batch.labels, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_TRUE(std::equal(batch.input.begin(), batch.input.begin() + 30, batch.input.begin() + 30));
  EXPECT_TRUE(std::equal(batch.input.begin(), batch.input.begin() + 30, batch.input.begin() + 60));
}

TEST_F(ImageFolderTest, FoldersThatAreRefused) {
  EXPECT_EQ(Refusal(At(), DPL_ERR_NOT_FOUND),
            Error("missing data folder: " + Path("train") +
                  "; pass --data-dir with a folder holding train/<class>/<image> and "
                  "test/<class>/<image> or val/<class>/<image> (.png, .jpg or .jpeg)"));
  std::filesystem::create_directories(Path("train"));
  EXPECT_EQ(Refusal(At()),
            Error(Path("train") + ": holds no class folder (train/<class>/<image>)"));
  Writer("standard " + dir_);
  std::filesystem::create_directories(Path("train/emu/empty"));
  WriteBytes(Path("train/emu/readme.txt"), {'h', 'i'});
  EXPECT_EQ(Refusal(At()),
            Error(Path("train/emu") + ": the class folder holds no .png, .jpg or .jpeg image"));
  std::filesystem::remove_all(Path("train/emu"));
  Settings test = At();
  test.split = DPL_DATASET_SPLIT_TEST;
  std::filesystem::create_directories(Path("test/emu"));
  EXPECT_EQ(Refusal(test), Error(Path("test") +
                                 ": its class folders (cat, dog, emu) differ from "
                                 "those of " +
                                 Path("train") +
                                 " (cat, dog); both "
                                 "splits need the same classes for the labels to "
                                 "agree"));
  WriteBytes(Path("train/dog/old.BMP"), {'B', 'M'});
  EXPECT_EQ(Refusal(At()), Error(Path("train/dog/old.BMP") +
                                 ": .bmp images are not read (only .png, .jpg and .jpeg); convert "
                                 "it or move it out of the folder"));
}

TEST_F(ImageFolderTest, ImagesThatAreRefused) {
  Writer("standard " + dir_);
  const std::vector<uint8_t> png = ReadBytes(Path("train/dog/q.png"));
  WriteBytes(Path("train/dog/q.png"), std::vector<uint8_t>(png.begin(), png.end() - 30));
  EXPECT_EQ(Refusal(At()), Error(Path("train/dog/q.png") +
                                 ": the PNG image does not decode: the file ends inside the image "
                                 "data"));
  WriteBytes(Path("train/dog/q.png"), png);
  WriteBytes(Path("train/dog/q.png"), {});
  EXPECT_EQ(Refusal(At()), Error(Path("train/dog/q.png") + ": the file is empty"));
  WriteBytes(Path("train/dog/q.png"), png);
  RunPython(dir_,
            "from PIL import Image\n"
            "Image.new('RGB', (7, 5)).save('train/dog/wide.png')\n"
            "Image.new('CMYK', (6, 5)).save('train/dog/ink.jpg')\n");
  EXPECT_EQ(Refusal(At()), Error(Path("train/dog/ink.jpg") +
                                 ": a CMYK JPEG; only greyscale and RGB images are read (convert "
                                 "it to RGB)"));
  std::filesystem::remove(Path("train/dog/ink.jpg"));
  EXPECT_EQ(Refusal(At()),
            Error(Path("train/dog/wide.png") + ": the image is 5x7 (height x width) but " +
                  Path("train/cat/a.png") +
                  " is 5x6; all images must have one size, or pass --data-options "
                  "resize=HxW"));
  EXPECT_EQ(Refusal(At("cache_mb=0")), Refusal(At()));  // headers are checked at create too
  Dataset resized("imagefolder", At("resize=5x6"));
  EXPECT_TRUE(resized.ok()) << resized.error();
}

TEST_F(ImageFolderTest, OptionValues) {
  Writer("standard " + dir_);
  EXPECT_EQ(Refusal(At("channels=2")),
            Error("option \"channels\" must be one of auto|1|3, got \"2\""));
  for (const std::string resize : {"32", "0x4", "4x", "x4", "4x40000", "4x-3"}) {
    EXPECT_EQ(Refusal(At("resize=" + resize)),
              Error("option \"resize\" expects HEIGHTxWIDTH of 1 to 32768 pixels each, e.g. "
                    "resize=32x32, got \"" +
                    resize + "\""));
  }
  EXPECT_EQ(Refusal(At("cache_mb=-1")), Error("option \"cache_mb\" must be 0 or more, got -1"));
  EXPECT_EQ(Refusal(At("channels=3,mean=0.5:0.5")),
            Error("option \"mean\" has 2 values but the samples of " + Path("train") +
                  " have 3 channels; give one value, or one per channel"));
  EXPECT_EQ(Refusal(At("size=3")),
            Error("unknown option \"size\" in --data-options; known options: mean, std, flip, "
                  "crop, channels, resize, cache_mb"));
}

}  // namespace
}  // namespace dpl::datasets::testing
