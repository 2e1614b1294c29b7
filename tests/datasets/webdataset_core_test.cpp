// The webdataset plugin's parts, linked directly: RandomResizedCrop's boxes against torchvision's
// get_params fed the same draws (shard_writer.py boxes), and the partial JPEG decode against a
// whole one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/image_decode.hpp"
#include "crop_geometry.hpp"
#include "image_region.hpp"
#include "webdataset_fixture.hpp"

namespace dpl::datasets::webdataset {
namespace {

using testing::ReadBytes;

using WebDatasetCoreTest = testing::WebDatasetFixture;

struct CropCase {
  int64_t height, width;
  uint64_t seed;
  int64_t epoch, index;
  CropRanges ranges;
};

// Images of ordinary, tiny and extreme shapes (the last ones fall back to the central crop), the
// default ranges and some that are not.
std::vector<CropCase> CropCases() {
  std::vector<CropCase> cases;
  std::mt19937_64 random(3);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {224, 224}, {375, 500}, {500, 375}, {1, 1},   {2, 3},       {3, 2},
      {17, 400},  {400, 17},  {10, 1000}, {33, 35}, {1080, 1920}, {256, 257}};
  const std::vector<CropRanges> ranges = {{},
                                          {0.5, 0.5, 1.0, 1.0},
                                          {0.25, 0.9, 0.5, 2.0},
                                          {0.01, 0.02, 10.0, 20.0},
                                          {1.0, 1.0, 0.1, 0.2}};
  for (const auto& [height, width] : shapes) {
    for (const CropRanges& range : ranges) {
      for (int k = 0; k < 8; ++k) {
        cases.push_back({height, width, random() % 1000, int64_t(random() % 50),
                         int64_t(random() % 100000), range});
      }
    }
  }
  return cases;
}

TEST_F(WebDatasetCoreTest, CropBoxesAreTorchvisionsForTheSameDraws) {
  const std::vector<CropCase> cases = CropCases();
  {
    std::ofstream out(Path("cases.txt"));
    out.precision(17);
    for (const CropCase& c : cases) {
      out << c.height << " " << c.width << " " << c.seed << " " << c.epoch << " " << c.index << " "
          << c.ranges.scale_low << " " << c.ranges.scale_high << " " << c.ranges.ratio_low << " "
          << c.ranges.ratio_high << "\n";
    }
  }
  Writer("boxes " + Path("boxes.txt") + " " + Path("cases.txt"));
  std::ifstream boxes(Path("boxes.txt"));
  int whole = 0;
  for (const CropCase& c : cases) {
    CropBox expected;
    ASSERT_TRUE(boxes >> expected.top >> expected.left >> expected.height >> expected.width);
    const CropBox box = DrawTrainSample(c.seed, c.epoch, c.index, c.height, c.width, c.ranges).box;
    EXPECT_TRUE(box == expected) << c.height << "x" << c.width << " seed " << c.seed << " epoch "
                                 << c.epoch << " index " << c.index << ": ours " << box.top << " "
                                 << box.left << " " << box.height << " " << box.width
                                 << ", torchvision's " << expected.top << " " << expected.left
                                 << " " << expected.height << " " << expected.width;
    whole += box.height == c.height && box.width == c.width;
  }
  // Some boxes are the whole image (scale 1 at the image's own ratio, or the fallback).
  EXPECT_GT(whole, 0);
}

// Every box of every JPEG kind decodes to the whole decode's pixels.
TEST_F(WebDatasetCoreTest, APartialJpegDecodeHasTheWholeDecodesPixels) {
  Writer("jpegs " + Path("jpegs"));
  std::mt19937_64 random(7);
  for (const std::string name : {"420", "422", "444", "grey", "progressive"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = ReadBytes(Path("jpegs/" + name + ".jpg"));
    const images::DecodedImage whole = images::DecodeImage(name, bytes.data(), bytes.size());
    const int64_t height = whole.header.height, width = whole.header.width;
    const int64_t channels = whole.header.channels;
    for (int k = 0; k < 40; ++k) {
      CropBox box;
      box.height = 1 + int64_t(random() % uint64_t(height));
      box.width = 1 + int64_t(random() % uint64_t(width));
      box.top = int64_t(random() % uint64_t(height - box.height + 1));
      box.left = int64_t(random() % uint64_t(width - box.width + 1));
      const ImageRegion region = DecodeImageRegion(name, bytes.data(), bytes.size(), box);
      ASSERT_LE(region.left, box.left);
      ASSERT_GE(region.left + region.width, box.left + box.width);
      for (int64_t y = box.top; y < box.top + box.height; ++y) {
        const uint8_t* ours = region.Row(y) + (box.left - region.left) * channels;
        const uint8_t* expected = whole.pixels.data() + (y * width + box.left) * channels;
        ASSERT_TRUE(std::equal(ours, ours + box.width * channels, expected))
            << "row " << y << " of box " << box.top << " " << box.left << " " << box.height << " "
            << box.width;
      }
    }
  }
}

}  // namespace
}  // namespace dpl::datasets::webdataset
