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

// A part of a JPEG: rows [top, top + rows) and columns [left, left + width) of the image.
struct JpegWindow {
  int64_t top = 0;
  int64_t rows = 0;
  int64_t left = 0;
  int64_t width = 0;
};
// What DecodeJpegRegion decoded: the window's rows, of columns [left, left + width), which hold
// the window's columns (widened to whole iMCUs and a margin), row-major, channels interleaved.
struct JpegRegion {
  ImageHeader image;  // the whole image's
  int64_t left = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // window.rows x width x image.channels
};
// Decodes only `window` of the JPEG in data[0 .. size): the rows above it are skipped
// (jpeg_skip_scanlines), the rows below never read, and only its columns (and a margin) go
// through the inverse DCT, upsampling and colour conversion (jpeg_crop_scanline). Its pixels are
// those of DecodeImage. Throws as DecodeImage does, and for a window outside the image.
JpegRegion DecodeJpegRegion(const std::string& path, const uint8_t* data, size_t size,
                            const JpegWindow& window);

}  // namespace dpl::datasets::images
