// The pixels of the part of an image a sample needs, decoded from a member's bytes. A JPEG decodes
// only that part (common/image_decode.hpp's DecodeJpegRegion: the rows above skipped, the rows
// below never read, only its columns and a margin through the inverse DCT; the pixels are those
// of a whole decode, tested). PNG (libpng) and WebP (libwebp) are decoded whole. Pixels are as
// Pillow decodes them; WebP's alpha is dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/image_decode.hpp"
#include "crop_geometry.hpp"

namespace dpl::datasets::webdataset {

enum class ImageFormat : uint16_t { kJpeg = 1, kPng = 2, kWebp = 3 };

// The format of an image member by its first bytes; throws PluginError(DPL_ERR_INVALID_ARGUMENT)
// naming `what` when it is none of them.
ImageFormat ImageFormatOf(const std::string& what, const uint8_t* data, size_t size);

// The image's height, width and channels (1 grey, 3 colour) from its header. Throws
// PluginError(DPL_ERR_INVALID_ARGUMENT) naming `what` when the header does not decode (or when
// data[0 .. size) is only the start of the image and its header lies further in).
images::ImageHeader ReadImageHeaderOf(const std::string& what, ImageFormat format,
                                      const uint8_t* data, size_t size);

// A decoded part of an image: rows [top, top + height) and columns [left, left + width) of it,
// row-major, channels interleaved.
struct ImageRegion {
  images::ImageHeader image;  // the whole image's size and channels
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;

  const uint8_t* Row(int64_t image_row) const {
    return pixels.data() + size_t((image_row - top) * width * image.channels);
  }
};

// Decodes at least the pixels of `needed` (image coordinates, inside the image) of the image in
// data[0 .. size). Throws PluginError(DPL_ERR_INVALID_ARGUMENT) naming `what` when the data does
// not decode (truncated, corrupt, CMYK).
ImageRegion DecodeImageRegion(const std::string& what, const uint8_t* data, size_t size,
                              const CropBox& needed);

}  // namespace dpl::datasets::webdataset
