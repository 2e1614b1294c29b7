// PNG (libpng) and JPEG (libjpeg-turbo) images decoded from memory into 8-bit pixels, the way
// Pillow (PIL) reads them: no gamma or colour management, 16-bit samples reduced to their high
// byte (as Pillow does for colour; its 16-bit grey to "L" clips at 255 instead), alpha dropped,
// palettes expanded to RGB, JPEGs with libjpeg's default (accurate integer) DCT and fancy
// upsampling. The format is told by the file's first bytes, not its name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpl::datasets::images {

// The largest height or width read: a header claiming more is refused before any allocation.
inline constexpr int64_t kMaxImageSide = 32768;

struct ImageHeader {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;  // 1 (grey, grey + alpha) or 3 (RGB, RGBA, palette; YCbCr JPEG)
};

// Pixels row-major, channels interleaved: height x width x channels bytes.
struct DecodedImage {
  ImageHeader header;
  std::vector<uint8_t> pixels;
};

// Reads only the header of the image in data[0 .. size). Throws
// PluginError(DPL_ERR_INVALID_ARGUMENT) naming `path` and the problem (not a PNG or JPEG, a header
// that does not decode, CMYK, too large).
ImageHeader ReadImageHeader(const std::string& path, const uint8_t* data, size_t size);

// Decodes the whole image; throws as ReadImageHeader does, also for truncated or corrupt data.
DecodedImage DecodeImage(const std::string& path, const uint8_t* data, size_t size);

}  // namespace dpl::datasets::images
