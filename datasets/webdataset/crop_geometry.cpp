#include "crop_geometry.hpp"

#include <algorithm>
#include <cmath>

namespace dpl::datasets::webdataset {
namespace {

// Python's int(round(x)) of a float: to the nearest integer, halves to even (the default
// rounding mode's nearbyint).
int64_t PythonRound(double x) {
  return int64_t(std::nearbyint(x));
}

}  // namespace

float UniformFloat(uint64_t draw, float from, float to) {
  // Each step rounded to float32 as torch's float kernel computes it (the volatile keeps a
  // compiler from fusing the multiply and the add).
  const float unit = float(draw >> 40) * (1.0f / 16777216.0f);
  volatile float scaled = unit * (to - from);
  return scaled + from;
}

CropBox RandomResizedCropBox(AugmentRandom& random, int64_t height, int64_t width,
                             const CropRanges& ranges) {
  const int64_t area = height * width;
  // torch.log(torch.tensor(ratio)): float32.
  const float log_low = std::log(float(ranges.ratio_low));
  const float log_high = std::log(float(ranges.ratio_high));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area =
        double(area) *
        double(UniformFloat(random.Next(), float(ranges.scale_low), float(ranges.scale_high)));
    const double aspect_ratio = double(std::exp(UniformFloat(random.Next(), log_low, log_high)));
    const int64_t w = PythonRound(std::sqrt(target_area * aspect_ratio));
    const int64_t h = PythonRound(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox box;
      box.height = h;
      box.width = w;
      box.top = int64_t(random.Below(uint64_t(height - h + 1)));
      box.left = int64_t(random.Below(uint64_t(width - w + 1)));
      return box;
    }
  }
  // The fallback: the central crop of the ratio range's nearest aspect ratio.
  const double in_ratio = double(width) / double(height);
  const double min_ratio = std::min(ranges.ratio_low, ranges.ratio_high);
  const double max_ratio = std::max(ranges.ratio_low, ranges.ratio_high);
  CropBox box{0, 0, height, width};
  if (in_ratio < min_ratio) {
    box.height = PythonRound(double(width) / min_ratio);
  } else if (in_ratio > max_ratio) {
    box.width = PythonRound(double(height) * max_ratio);
  }
  // Python's // on non-negative integers.
  box.top = (height - box.height) / 2;
  box.left = (width - box.width) / 2;
  return box;
}

TrainDraws DrawTrainSample(uint64_t seed, int64_t epoch, int64_t index, int64_t height,
                           int64_t width, const CropRanges& ranges) {
  AugmentRandom random(seed, epoch, index);
  TrainDraws draws;
  draws.flip = (random.Next() >> 63) != 0;
  draws.box = RandomResizedCropBox(random, height, width, ranges);
  return draws;
}

ResizedSize ResizeShorterSide(int64_t height, int64_t width, int64_t shorter_side) {
  const int64_t short_side = std::min(height, width), long_side = std::max(height, width);
  // int(requested * long / short): Python's true division, then truncation.
  const auto new_long = int64_t(double(shorter_side) * double(long_side) / double(short_side));
  return width <= height ? ResizedSize{new_long, shorter_side}
                         : ResizedSize{shorter_side, new_long};
}

CropBox CenterCropBox(int64_t height, int64_t width, int64_t crop_height, int64_t crop_width) {
  CropBox box;
  box.height = crop_height;
  box.width = crop_width;
  box.top = PythonRound(double(height - crop_height) / 2.0);
  box.left = PythonRound(double(width - crop_width) / 2.0);
  return box;
}

}  // namespace dpl::datasets::webdataset
