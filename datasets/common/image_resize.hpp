// Channel conversion and resizing of decoded 8-bit images, both with Pillow's arithmetic so that
// a sample equals what torchvision's ImageFolder with Resize gives (PIL images):
//  - grey to RGB repeats the grey value; RGB to grey is ITU-R 601-2 luma as Pillow's
//    convert("L"): (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16;
//  - resize=HxW is Pillow's Image.resize((W, H), Image.BILINEAR): a convolution with the
//    triangle filter, widened by the scale factor when shrinking (so it averages every source
//    pixel, antialiased), coefficients normalised to sum 1 and rounded to 22-bit fixed point,
//    each output pixel rounded and clamped to 0..255; first along rows into an 8-bit
//    intermediate, then along columns.
#pragma once

#include <cstdint>
#include <vector>

#include "common/image_decode.hpp"

namespace dpl::datasets::images {

// Pillow's fixed point: 8 bits of result and 2 of headroom in an int32.
inline constexpr int kResamplePrecisionBits = 32 - 8 - 2;

// Pillow's bilinear resampling of `in_size` positions to `out_size`: for every output position,
// the first input position it reads, how many it reads and their fixed-point weights (sum
// 1 << kResamplePrecisionBits, rounded). An output value is
// clamp((sum(input * weight) + (1 << (kResamplePrecisionBits - 1))) >> kResamplePrecisionBits).
struct ResampleCoefficients {
  int64_t taps = 0;              // weights per output position
  std::vector<int64_t> first;    // first input index
  std::vector<int64_t> count;    // inputs read
  std::vector<int32_t> weights;  // taps per output position
};
ResampleCoefficients BilinearCoefficients(int64_t in_size, int64_t out_size);

// `image` with `channels` (1 or 3) channels.
DecodedImage ConvertChannels(DecodedImage image, int64_t channels);

// `image` resized to height x width (returned as it is when it has that size already).
DecodedImage Resize(DecodedImage image, int64_t height, int64_t width);

}  // namespace dpl::datasets::images
