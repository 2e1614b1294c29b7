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

#include "image_decode.hpp"

namespace dpl::datasets::imagefolder {

// `image` with `channels` (1 or 3) channels.
DecodedImage ConvertChannels(DecodedImage image, int64_t channels);

// `image` resized to height x width (returned as it is when it has that size already).
DecodedImage Resize(DecodedImage image, int64_t height, int64_t width);

}  // namespace dpl::datasets::imagefolder
