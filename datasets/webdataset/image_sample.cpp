#include "image_sample.hpp"

#include <algorithm>

#include "common/image_resize.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using images::BilinearCoefficients;
using images::kResamplePrecisionBits;
using images::ResampleCoefficients;
using support::PluginError;

constexpr int32_t kRoundingHalf = 1 << (kResamplePrecisionBits - 1);

uint8_t Clip8(int32_t sum) {
  return uint8_t(std::clamp(sum >> kResamplePrecisionBits, 0, 255));
}

// One axis of the resize: Pillow's coefficients from the box's extent to the resized extent, or
// none when they are equal (Pillow then skips the pass). `window_first` and `window_size` are
// the output positions the sample keeps.
class AxisResample {
 public:
  AxisResample(int64_t box_size, int64_t resized_size, int64_t window_first, int64_t window_size)
      : window_first_(window_first), window_size_(window_size) {
    if (box_size != resized_size) coefficients_ = BilinearCoefficients(box_size, resized_size);
  }
  bool identity() const { return coefficients_.taps == 0; }
  // The first input position the window reads, and one past the last (box coordinates).
  int64_t FirstInput() const { return identity() ? window_first_ : First(window_first_); }
  int64_t EndInput() const {
    const int64_t last = window_first_ + window_size_ - 1;
    return identity() ? last + 1 : First(last) + Count(last);
  }
  int64_t First(int64_t position) const { return coefficients_.first[size_t(position)]; }
  int64_t Count(int64_t position) const { return coefficients_.count[size_t(position)]; }
  const int32_t* Weights(int64_t position) const {
    return coefficients_.weights.data() + position * coefficients_.taps;
  }
  int64_t window_first() const { return window_first_; }
  int64_t window_size() const { return window_size_; }

 private:
  ResampleCoefficients coefficients_;
  int64_t window_first_;
  int64_t window_size_;
};

// The horizontal pass of rows [row_first, row_end) of the box: each an 8-bit row of the window's
// columns, channels interleaved.
template <int kChannels>
void HorizontalPass(const ImageRegion& region, const CropBox& box, const AxisResample& columns,
                    int64_t row_first, int64_t row_end, uint8_t* out) {
  const int64_t width = columns.window_size();
  for (int64_t r = row_first; r < row_end; ++r) {
    // The box's column 0 in this row of the region.
    const uint8_t* source = region.Row(box.top + r) + (box.left - region.left) * kChannels;
    uint8_t* row = out + (r - row_first) * width * kChannels;
    if (columns.identity()) {
      std::copy(source + columns.window_first() * kChannels,
                source + (columns.window_first() + width) * kChannels, row);
      continue;
    }
    for (int64_t x = 0; x < width; ++x) {
      const int64_t position = columns.window_first() + x;
      const int32_t* k = columns.Weights(position);
      const uint8_t* in = source + columns.First(position) * kChannels;
      const int64_t taps = columns.Count(position);
      int32_t sums[kChannels];
      for (int c = 0; c < kChannels; ++c) sums[c] = kRoundingHalf;
      for (int64_t t = 0; t < taps; ++t) {
        for (int c = 0; c < kChannels; ++c) sums[c] += int32_t(in[t * kChannels + c]) * k[t];
      }
      for (int c = 0; c < kChannels; ++c) row[x * kChannels + c] = Clip8(sums[c]);
    }
  }
}

// The vertical pass over the horizontal pass's rows (starting at box row `row_first`), written
// through the table as float32 (C, H, W), flipped when asked.
void VerticalPass(const uint8_t* rows, int64_t row_first, const AxisResample& axis, int64_t width,
                  int64_t channels, bool flip, const float* table, float* out) {
  const int64_t height = axis.window_size(), plane = height * width, row_values = width * channels;
  std::vector<int32_t> sums(static_cast<size_t>(row_values));
  std::vector<uint8_t> values(static_cast<size_t>(row_values));
  for (int64_t y = 0; y < height; ++y) {
    const int64_t position = axis.window_first() + y;
    const uint8_t* line = nullptr;
    if (axis.identity()) {
      line = rows + (position - row_first) * row_values;
    } else {
      std::fill(sums.begin(), sums.end(), kRoundingHalf);
      const int32_t* k = axis.Weights(position);
      const uint8_t* first = rows + (axis.First(position) - row_first) * row_values;
      for (int64_t t = 0; t < axis.Count(position); ++t) {
        const uint8_t* in = first + t * row_values;
        const int32_t weight = k[t];
        for (int64_t i = 0; i < row_values; ++i) sums[size_t(i)] += int32_t(in[i]) * weight;
      }
      for (int64_t i = 0; i < row_values; ++i) values[size_t(i)] = Clip8(sums[size_t(i)]);
      line = values.data();
    }
    for (int64_t c = 0; c < channels; ++c) {
      const float* channel_table = table + c * 256;
      float* out_row = out + c * plane + y * width;
      for (int64_t x = 0; x < width; ++x) {
        out_row[flip ? width - 1 - x : x] = channel_table[line[x * channels + c]];
      }
    }
  }
}

}  // namespace

SamplePlan PlanImageSample(const ImageSampleSpec& spec, int64_t index, int64_t epoch,
                           int64_t image_height, int64_t image_width) {
  SamplePlan plan;
  plan.box = {0, 0, image_height, image_width};
  plan.resized_height = image_height;
  plan.resized_width = image_width;
  switch (spec.crop) {
    case ImageCrop::kRandomResized: {
      const TrainDraws draws =
          DrawTrainSample(spec.seed, epoch, index, image_height, image_width, spec.ranges);
      plan.box = draws.box;
      plan.resized_height = spec.height;
      plan.resized_width = spec.width;
      plan.flip = spec.flip && draws.flip;
      break;
    }
    case ImageCrop::kCenter: {
      const ResizedSize resized = ResizeShorterSide(image_height, image_width, spec.resize_shorter);
      plan.resized_height = resized.height;
      plan.resized_width = resized.width;
      plan.flip = spec.flip && (AugmentRandom(spec.seed, epoch, index).Next() >> 63) != 0;
      plan.window = CenterCropBox(resized.height, resized.width, spec.height, spec.width);
      return plan;
    }
    case ImageCrop::kAsStored:
      plan.flip = spec.flip && (AugmentRandom(spec.seed, epoch, index).Next() >> 63) != 0;
      break;
  }
  plan.window = {0, 0, plan.resized_height, plan.resized_width};
  return plan;
}

void WriteImageSample(const ImageSampleSpec& spec, const std::string& what, const uint8_t* data,
                      size_t size, int64_t image_height, int64_t image_width, int64_t index,
                      int64_t epoch, float* out) {
  if (spec.crop == ImageCrop::kAsStored &&
      (image_height != spec.height || image_width != spec.width)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + ": the image is " + std::to_string(image_height) + "x" +
                          std::to_string(image_width) + " but the samples are " +
                          std::to_string(spec.height) + "x" + std::to_string(spec.width));
  }
  const SamplePlan plan = PlanImageSample(spec, index, epoch, image_height, image_width);
  const AxisResample rows(plan.box.height, plan.resized_height, plan.window.top,
                          plan.window.height);
  const AxisResample columns(plan.box.width, plan.resized_width, plan.window.left,
                             plan.window.width);
  const int64_t row_first = rows.FirstInput(), row_end = rows.EndInput();
  const CropBox needed{plan.box.top + row_first, plan.box.left + columns.FirstInput(),
                       row_end - row_first, columns.EndInput() - columns.FirstInput()};
  ImageRegion region = DecodeImageRegion(what, data, size, needed);
  if (region.image.height != image_height || region.image.width != image_width) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + ": the image is " + std::to_string(region.image.height) + "x" +
                          std::to_string(region.image.width) + " but was " +
                          std::to_string(image_height) + "x" + std::to_string(image_width) +
                          " when its shard was indexed");
  }
  if (region.image.channels != spec.channels) {
    images::DecodedImage converted{{region.height, region.width, region.image.channels},
                                   std::move(region.pixels)};
    converted = images::ConvertChannels(std::move(converted), spec.channels);
    region.pixels = std::move(converted.pixels);
    region.image.channels = spec.channels;
  }
  std::vector<uint8_t> horizontal(
      size_t((row_end - row_first) * plan.window.width * spec.channels));
  if (spec.channels == 1) {
    HorizontalPass<1>(region, plan.box, columns, row_first, row_end, horizontal.data());
  } else {
    HorizontalPass<3>(region, plan.box, columns, row_first, row_end, horizontal.data());
  }
  VerticalPass(horizontal.data(), row_first, rows, plan.window.width, spec.channels, plan.flip,
               spec.table.data(), out);
}

}  // namespace dpl::datasets::webdataset
