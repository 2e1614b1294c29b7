// Where an image's sample comes from: torchvision's RandomResizedCrop for training, Resize of the
// shorter side then CenterCrop for validation, in torchvision's arithmetic.
//
// Note [Random resized crop draws]: a training sample's random choices come from the generator
// of (seed, epoch, sample index) (Note [Augmentation generator], common/augment_random.hpp), so
// the same sample gets the same crop and flip on any rank, at any world size and after a resume.
// Its draws, in order: the flip (draw >> 63; 1 = flipped, with flip=horizontal), then the crop's,
// as RandomResizedCrop.get_params takes them from torch: for each of up to 10 attempts a scale
// and a log aspect ratio, each a float32 uniform(from, to) = u * (to - from) + from with
// u = (draw >> 40) * 2^-24 (torch's 24-bit float draw, in float32 arithmetic), then, for the
// attempt that fits, the top and the left offsets, each draw % (range) as torch.randint(0, range).
// Everything between the draws is torchvision's arithmetic: log and exp in float32, the area and
// the square roots in double, Python's round (half to even), the central fallback.
#pragma once

#include <cstdint>

#include "common/augment_random.hpp"

namespace dpl::datasets::webdataset {

// A window of an image, in its pixels.
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

inline bool operator==(const CropBox& a, const CropBox& b) {
  return a.top == b.top && a.left == b.left && a.height == b.height && a.width == b.width;
}

// RandomResizedCrop's ranges: the crop's share of the image's area and its aspect ratio
// (width / height).
struct CropRanges {
  double scale_low = 0.08;
  double scale_high = 1.0;
  double ratio_low = 3.0 / 4.0;
  double ratio_high = 4.0 / 3.0;
};

// torch's float32 uniform(from, to) of one draw (Note [Random resized crop draws]).
float UniformFloat(uint64_t draw, float from, float to);

// RandomResizedCrop.get_params for an image of height x width, drawing from `random`.
CropBox RandomResizedCropBox(AugmentRandom& random, int64_t height, int64_t width,
                             const CropRanges& ranges);

// The draws of a training sample (Note [Random resized crop draws]).
struct TrainDraws {
  bool flip = false;
  CropBox box;
};
TrainDraws DrawTrainSample(uint64_t seed, int64_t epoch, int64_t index, int64_t height,
                           int64_t width, const CropRanges& ranges);

// Resize(shorter_side) of an image of height x width: its new height and width, as torchvision's
// _compute_resized_output_size (the longer side int(shorter_side * long / short)).
struct ResizedSize {
  int64_t height = 0;
  int64_t width = 0;
};
ResizedSize ResizeShorterSide(int64_t height, int64_t width, int64_t shorter_side);

// CenterCrop(crop_height, crop_width) of an image of height x width (no larger than it):
// top = int(round((height - crop_height) / 2.0)), likewise left.
CropBox CenterCropBox(int64_t height, int64_t width, int64_t crop_height, int64_t crop_width);

}  // namespace dpl::datasets::webdataset
