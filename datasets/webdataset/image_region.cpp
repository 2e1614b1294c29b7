#include "image_region.hpp"

#if DPL_WEBDATASET_WEBP
#include <webp/decode.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using images::ImageHeader;
using support::PluginError;

bool IsWebp(const uint8_t* data, size_t size) {
  return size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0;
}

ImageRegion DecodeJpegRegion(const std::string& what, const uint8_t* data, size_t size,
                             const CropBox& needed) {
  images::JpegRegion jpeg = images::DecodeJpegRegion(
      what, data, size, {needed.top, needed.height, needed.left, needed.width});
  ImageRegion region;
  region.image = jpeg.image;
  region.top = needed.top;
  region.height = needed.height;
  region.left = jpeg.left;
  region.width = jpeg.width;
  region.pixels = std::move(jpeg.pixels);
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
