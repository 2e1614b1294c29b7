// Note [Decoding without C++ across longjmp] (common/image_decode.cpp) holds here too:
// DecodeJpegRows calls setjmp and holds only plain C data.
#include "image_region.hpp"

#include <stdio.h>  // jpeglib.h needs FILE declared first

#include <jerror.h>
#include <jpeglib.h>
#if DPL_WEBDATASET_WEBP
#include <webp/decode.h>
#endif

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using images::ImageHeader;
using support::PluginError;

constexpr size_t kErrorBytes = 256;
// Columns decoded beyond the needed ones on each side (one iMCU of 4:2:0 data): a partial-width
// decode's fancy upsampling may differ from a whole decode's at the region's edges.
constexpr int64_t kColumnMargin = 16;

bool IsWebp(const uint8_t* data, size_t size) {
  return size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0;
}

// A decoded band of JPEG rows, C-style (Note [Decoding without C++ across longjmp]).
struct RawRows {
  uint8_t* pixels = nullptr;  // malloc'ed; rows x width x channels
  int64_t image_height = 0;
  int64_t image_width = 0;
  int64_t channels = 0;
  int64_t left = 0;   // the first column decoded
  int64_t width = 0;  // columns decoded
  char error[kErrorBytes] = {0};
  bool unsupported_colour = false;
};

struct JpegErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
  RawRows* result;
};

void OnJpegError(j_common_ptr decoder) {
  auto* errors = reinterpret_cast<JpegErrors*>(decoder->err);
  char message[JMSG_LENGTH_MAX];
  (*decoder->err->format_message)(decoder, message);
  std::snprintf(errors->result->error, kErrorBytes, "%s", message);
  std::longjmp(errors->jump, 1);
}

// As common/image_decode.cpp: a file that ends early is an error, other warnings are not.
void OnJpegMessage(j_common_ptr decoder, int level) {
  if (level < 0 && decoder->err->msg_code == JWRN_JPEG_EOF) (*decoder->err->error_exit)(decoder);
}

// Decodes rows [top, top + rows) of the JPEG, columns [left, left + width) at least.
bool DecodeJpegRows(const uint8_t* data, size_t size, int64_t top, int64_t rows, int64_t left,
                    int64_t width, RawRows* result) {
  jpeg_decompress_struct decoder;
  JpegErrors errors;
  decoder.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = OnJpegError;
  errors.manager.emit_message = OnJpegMessage;
  errors.result = result;
  if (setjmp(errors.jump)) {
    std::free(result->pixels);
    result->pixels = nullptr;
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  jpeg_create_decompress(&decoder);
  jpeg_mem_src(&decoder, data, static_cast<unsigned long>(size));
  jpeg_read_header(&decoder, TRUE);
  result->image_height = decoder.image_height;
  result->image_width = decoder.image_width;
  if (decoder.jpeg_color_space == JCS_CMYK || decoder.jpeg_color_space == JCS_YCCK) {
    result->unsupported_colour = true;
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  const bool grey = decoder.jpeg_color_space == JCS_GRAYSCALE;
  result->channels = grey ? 1 : 3;
  if (top < 0 || left < 0 || rows < 1 || width < 1 || top + rows > result->image_height ||
      left + width > result->image_width) {
    std::snprintf(result->error, kErrorBytes, "the region asked for lies outside the image");
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  decoder.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&decoder);
  JDIMENSION x = JDIMENSION(std::max<int64_t>(0, left - kColumnMargin));
  JDIMENSION columns =
      JDIMENSION(std::min<int64_t>(result->image_width, left + width + kColumnMargin) - int64_t(x));
  if (columns < decoder.output_width) jpeg_crop_scanline(&decoder, &x, &columns);
  result->left = x;
  result->width = decoder.output_width;
  const size_t row_bytes = size_t(decoder.output_width) * size_t(decoder.output_components);
  result->pixels = static_cast<uint8_t*>(std::malloc(row_bytes * size_t(rows)));
  if (result->pixels == nullptr) {
    std::snprintf(result->error, kErrorBytes, "out of memory");
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  if (top > 0) jpeg_skip_scanlines(&decoder, JDIMENSION(top));
  while (decoder.output_scanline < JDIMENSION(top + rows)) {
    JSAMPROW row = result->pixels + size_t(decoder.output_scanline - top) * row_bytes;
    jpeg_read_scanlines(&decoder, &row, 1);
  }
  jpeg_abort_decompress(&decoder);  // the rows below are not needed
  jpeg_destroy_decompress(&decoder);
  return true;
}

ImageRegion DecodeJpegRegion(const std::string& what, const uint8_t* data, size_t size,
                             const CropBox& needed) {
  RawRows raw;
  const bool decoded =
      DecodeJpegRows(data, size, needed.top, needed.height, needed.left, needed.width, &raw);
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(raw.pixels, std::free);
  if (raw.unsupported_colour) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what +
                          ": a CMYK JPEG; only greyscale and RGB images are read (convert it "
                          "to RGB)");
  }
  if (!decoded) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + ": the JPEG image does not decode: " + raw.error);
  }
  ImageRegion region;
  region.image = {raw.image_height, raw.image_width, raw.channels};
  region.top = needed.top;
  region.height = needed.height;
  region.left = raw.left;
  region.width = raw.width;
  region.pixels.assign(pixels.get(),
                       pixels.get() + size_t(needed.height * raw.width * raw.channels));
  return region;
}

#if !DPL_WEBDATASET_WEBP
[[noreturn]] void RefuseWebp(const std::string& what) {
  throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                    what +
                        ": a WebP image, and this build reads none; install libwebp-dev "
                        "(tools/setup.sh) and build again, or store the images as JPEG or PNG");
}
#endif

ImageRegion DecodeWebp(const std::string& what, const uint8_t* data, size_t size) {
#if !DPL_WEBDATASET_WEBP
  (void)data;
  (void)size;
  RefuseWebp(what);
#else
  const ImageHeader header = ReadImageHeaderOf(what, ImageFormat::kWebp, data, size);
  ImageRegion region;
  region.image = header;
  region.height = header.height;
  region.width = header.width;
  region.pixels.resize(size_t(header.height * header.width * 3));
  if (WebPDecodeRGBInto(data, size, region.pixels.data(), region.pixels.size(),
                        int(header.width * 3)) == nullptr) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + ": the WebP image does not decode (truncated or corrupt)");
  }
  return region;
#endif
}

}  // namespace

ImageFormat ImageFormatOf(const std::string& what, const uint8_t* data, size_t size) {
  if (IsWebp(data, size)) return ImageFormat::kWebp;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (size >= 8 && std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (size == 0) throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + ": the image is empty");
  std::string start;
  for (size_t i = 0; i < size && i < 4; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", data[i]);
    start += hex;
  }
  throw PluginError(DPL_ERR_INVALID_ARGUMENT, what +
                                                  ": not a JPEG, PNG or WebP image (it starts "
                                                  "with the bytes " +
                                                  start + ")");
}

ImageHeader ReadImageHeaderOf(const std::string& what, ImageFormat format, const uint8_t* data,
                              size_t size) {
  if (format != ImageFormat::kWebp) return images::ReadImageHeader(what, data, size);
#if !DPL_WEBDATASET_WEBP
  RefuseWebp(what);
#else
  int width = 0, height = 0;
  if (!WebPGetInfo(data, size, &width, &height)) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, what + ": the WebP image's header does not decode");
  }
  if (width > images::kMaxImageSide || height > images::kMaxImageSide) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      what + ": the image is " + std::to_string(height) + "x" +
                          std::to_string(width) + " (height x width); images of 1 to " +
                          std::to_string(images::kMaxImageSide) + " pixels a side are read");
  }
  return ImageHeader{height, width, 3};
#endif
}

ImageRegion DecodeImageRegion(const std::string& what, const uint8_t* data, size_t size,
                              const CropBox& needed) {
  switch (ImageFormatOf(what, data, size)) {
    case ImageFormat::kJpeg:
      return DecodeJpegRegion(what, data, size, needed);
    case ImageFormat::kWebp:
      return DecodeWebp(what, data, size);
    case ImageFormat::kPng:
      break;
  }
  images::DecodedImage image = images::DecodeImage(what, data, size);
  ImageRegion region;
  region.image = image.header;
  region.height = image.header.height;
  region.width = image.header.width;
  region.pixels = std::move(image.pixels);
  return region;
}

}  // namespace dpl::datasets::webdataset
