// Note [Sample transform]: every in-tree plugin turns a stored sample into the float32 row that
// `fill` writes the same way:
//  1. the stored value: uint8 as float(v) * (1.0f / 255.0f) (the recipe's ToTensor), float32 as
//     it is, int64 as float(v);
//  2. normalised per channel in float32: (value - mean[c]) / std[c]; the channel of an element is
//     its index along the sample's first axis when the sample has 3 or more axes (C, H, W, ...),
//     and 0 otherwise;
//  3. train split only, when asked: a random crop with zero padding P, as torchvision's
//     RandomCrop(size, padding=P) (the image padded by P stored zeros on every side, then a
//     window of the original size taken at an offset drawn from [0, 2P] x [0, 2P]), then a
//     horizontal flip with probability 1/2 (RandomHorizontalFlip), both drawn as Note
//     [Augmentation generator] says. They act on the last two axes (height, width), every
//     channel alike. A padded element is a stored 0 (black), so it is written as
//     (0 - mean[c]) / std[c], as padding before ToTensor and Normalize gives.
// uint8 values go through a table of 256 floats per channel computed with exactly that
// arithmetic, so the idx plugin with its defaults writes the launcher's former values bit for
// bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dpl/support/options.hpp"

namespace dpl::datasets {

enum class SourceType { kUInt8, kFloat32, kInt64 };

const char* SourceTypeName(SourceType type);
size_t SourceTypeSize(SourceType type);

// One value for every channel, or one per channel.
struct Normalisation {
  std::vector<float> mean;
  std::vector<float> std;
};

// What --data-options say about the transform.
struct TransformOptions {
  Normalisation normalisation;  // empty lists: the plugin's defaults
  bool flip_horizontal = false;
  int64_t crop_padding = 0;  // 0: no crop
};

// The separator of a list value such as mean=0.5:0.5:0.5 (',' separates the options).
inline constexpr char kListSeparator = ':';
inline constexpr int64_t kMaxCropPadding = 4096;

// Reads "mean" and "std" (numbers separated by ':'; std values > 0), and when `images`, "flip"
// (none|horizontal) and "crop" (the padding P, 0 = none).
TransformOptions ReadTransformOptions(const support::KeyValueOptions& options, bool images);

// "(1, 28, 28)"
std::string ShapeText(const std::vector<int64_t>& shape);

class SampleTransform {
 public:
  // Checks the options against the samples (`data_name` names the data in messages): a list of
  // mean or std values must have one value or one per channel, and cropping or flipping needs
  // samples of at least two axes. `augment` is false for the test split: the crop and flip are
  // then accepted but not applied.
  SampleTransform(const TransformOptions& options, const Normalisation& defaults,
                  std::vector<int64_t> sample_shape, SourceType source, bool augment, uint64_t seed,
                  const std::string& data_name);

  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t elements() const { return elements_; }
  SourceType source() const { return source_; }
  // For uint8 sources: the float32 each stored byte value becomes, 256 values per channel (the
  // table Apply reads), for a plugin that writes samples of its own making alike.
  const std::vector<float>& uint8_table() const { return uint8_table_; }
  // Writes sample `index` of `epoch`, stored at `source` (elements() values of the source type,
  // C order, any alignment), to out[0 .. elements()).
  void Apply(const void* source, int64_t index, int64_t epoch, float* out) const;

 private:
  template <typename Value>
  void ApplyWith(const Value& value, int64_t index, int64_t epoch, float* out) const;

  std::vector<int64_t> sample_shape_;
  SourceType source_;
  int64_t elements_ = 1;
  int64_t channels_ = 1;
  int64_t height_ = 1;
  int64_t width_ = 1;
  int64_t planes_per_channel_ = 1;  // planes (height x width) of one channel
  std::vector<float> mean_;         // per channel
  std::vector<float> std_;
  std::vector<float> uint8_table_;  // 256 per channel
  bool flip_ = false;
  int64_t crop_padding_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace dpl::datasets
