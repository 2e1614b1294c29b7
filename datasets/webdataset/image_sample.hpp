// One image sample from its member's bytes, in one pass after the decode: the needed part of the
// image decoded (image_region.hpp), its channels converted as Pillow's convert() does, the crop
// box resized with Pillow's bilinear arithmetic (common/image_resize.hpp: a horizontal pass into
// 8-bit values, then a vertical one; only the rows and columns the output reads), flipped and
// written as normalised float32 (C, H, W) through a table of 256 values per channel, as
// common/sample_transform.hpp computes them.
//
// What a sample is, by split and options (torchvision's transforms on a PIL image):
//  - train, crop=random_resized: RandomResizedCrop((H, W), scale, ratio) then
//    RandomHorizontalFlip when flip=horizontal (Note [Random resized crop draws]);
//  - validation and test, and train with crop=center: Resize(resize) then CenterCrop((H, W));
//  - without size=: every image as it is stored (all of one size), flipped when asked (train).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "crop_geometry.hpp"
#include "image_region.hpp"

namespace dpl::datasets::webdataset {

enum class ImageCrop { kAsStored, kRandomResized, kCenter };

struct ImageSampleSpec {
  int64_t channels = 3;  // of the sample: 1 or 3
  int64_t height = 0;    // of the sample
  int64_t width = 0;
  ImageCrop crop = ImageCrop::kAsStored;
  CropRanges ranges;           // kRandomResized
  int64_t resize_shorter = 0;  // kCenter: the shorter side's length before the crop
  bool flip = false;           // a random horizontal flip (train)
  uint64_t seed = 0;
  std::vector<float> table;  // channels x 256: the float32 of each stored byte value
};

// Where sample `index` of `epoch` comes from in an image of height x width: the box of the image
// that is resized, the size it is resized to, and the window of the resized image that is the
// sample (all of it but for the center crop), and whether it is flipped.
struct SamplePlan {
  CropBox box;
  int64_t resized_height = 0;
  int64_t resized_width = 0;
  CropBox window;
  bool flip = false;
};
SamplePlan PlanImageSample(const ImageSampleSpec& spec, int64_t index, int64_t epoch,
                           int64_t image_height, int64_t image_width);

// Writes sample `index` of `epoch` of the image in data[0 .. size), which the index says is
// image_height x image_width, to out[0 .. C * H * W). Throws PluginError(DPL_ERR_INVALID_ARGUMENT)
// naming `what` when the image does not decode or has another size than the index says.
void WriteImageSample(const ImageSampleSpec& spec, const std::string& what, const uint8_t* data,
                      size_t size, int64_t image_height, int64_t image_width, int64_t index,
                      int64_t epoch, float* out);

}  // namespace dpl::datasets::webdataset
