// Note [Decoding without C++ across longjmp]: libpng and libjpeg report errors by longjmp out of
// their callbacks. A longjmp that skips a C++ object's destructor is undefined behaviour, so the
// functions that call setjmp (DecodePng, DecodeJpeg) hold only plain C data: the caller's
// buffers are allocated before, or through a plain malloc that the error path frees.
#include "common/image_decode.hpp"

#include <png.h>
#include <stdio.h>  // jpeglib.h needs FILE declared first

#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dpl/support/error.hpp"

namespace dpl::datasets::images {
namespace {

using support::PluginError;

constexpr size_t kErrorBytes = 256;
constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

// Columns decoded beyond a partial JPEG window's on each side (one iMCU of 4:2:0 data): a
// partial-width decode's fancy upsampling may differ from a whole decode's at its edges
// (libjpeg.txt, "Partial image decompression"), so those columns are decoded and not used.
constexpr int64_t kJpegColumnMargin = 16;

// The outcome of a C-style decode: a header, maybe malloc'ed pixels, or an error text.
struct RawDecode {
  ImageHeader header;
  // malloc'ed; rows x width x channels of the window decoded (the whole image unless a JPEG
  // window was asked for)
  uint8_t* pixels = nullptr;
  int64_t left = 0;   // the window's first column
  int64_t width = 0;  // its columns
  char error[kErrorBytes] = {0};
  bool unsupported_colour = false;  // a CMYK or YCCK JPEG
};

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t offset;
  RawDecode* result;
};

void OnPngError(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->result->error, kErrorBytes, "%s", message);
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp, png_const_charp) {}  // ancillary problems; the pixels are fine

void ReadPngBytes(png_structp png, png_bytep out, png_size_t count) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (input->size - input->offset < count) png_error(png, "the file ends inside the image data");
  std::memcpy(out, input->data + input->offset, count);
  input->offset += count;
}

// Note [Decoding without C++ across longjmp].
bool DecodePng(const uint8_t* data, size_t size, bool header_only, RawDecode* result) {
  PngInput input{data, size, 0, result};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, OnPngError, OnPngWarning);
  if (png == nullptr) {
    std::snprintf(result->error, kErrorBytes, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  png_bytep* volatile rows = nullptr;
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    std::free(rows);
    std::free(result->pixels);
    result->pixels = nullptr;
    if (result->error[0] == 0) std::snprintf(result->error, kErrorBytes, "out of memory");
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_set_read_fn(png, &input, ReadPngBytes);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info);
  const png_uint_32 height = png_get_image_height(png, info);
  const int colour = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  result->header.height = height;
  result->header.width = width;
  result->header.channels = (colour & PNG_COLOR_MASK_COLOR) ? 3 : 1;
  if (!header_only) {
    if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    // Alpha (the file's, or a palette's transparency that libpng expands) is dropped below.
    const size_t decoded_channels = png_get_channels(png, info);
    const size_t row_bytes = size_t(width) * decoded_channels;
    if (png_get_rowbytes(png, info) != row_bytes || png_get_bit_depth(png, info) != 8) {
      png_error(png, "unexpected row layout");
    }
    result->pixels = static_cast<uint8_t*>(std::malloc(row_bytes * height));
    rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * height));
    if (result->pixels == nullptr || rows == nullptr) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = result->pixels + y * row_bytes;
    png_read_image(png, rows);
    const size_t kept = size_t(result->header.channels);
    if (decoded_channels != kept) {
      const size_t pixel_count = size_t(width) * height;
      for (size_t p = 0; p < pixel_count; ++p) {
        for (size_t c = 0; c < kept; ++c) {
          result->pixels[p * kept + c] = result->pixels[p * decoded_channels + c];
        }
      }
    }
  }
  std::free(rows);
  result->width = result->header.width;
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

struct JpegErrors {
  jpeg_error_mgr manager;
  jmp_buf jump;
  RawDecode* result;
};

void OnJpegError(j_common_ptr decoder) {
  auto* errors = reinterpret_cast<JpegErrors*>(decoder->err);
  char message[JMSG_LENGTH_MAX];
  (*decoder->err->format_message)(decoder, message);
  std::snprintf(errors->result->error, kErrorBytes, "%s", message);
  std::longjmp(errors->jump, 1);
}

// libjpeg goes on after a file ends early, filling the rest with grey: a silently wrong sample.
// That warning is an error here (Pillow refuses such files too); other warnings are ignored.
void OnJpegMessage(j_common_ptr decoder, int level) {
  if (level < 0 && decoder->err->msg_code == JWRN_JPEG_EOF) (*decoder->err->error_exit)(decoder);
}

// Decodes the window's rows and at least its columns into result->pixels (the columns decoded:
// result->left, result->width). A partial width decodes whole iMCUs and a margin
// (kJpegColumnMargin) that the caller does not use; the rows above are skipped, those below never
// read. Note [Decoding without C++ across longjmp].
bool DecodeJpegWindow(jpeg_decompress_struct* decoder, const JpegWindow& window,
                      RawDecode* result) {
  const bool whole = window.top == 0 && window.rows == result->header.height && window.left == 0 &&
                     window.width == result->header.width;
  jpeg_start_decompress(decoder);
  JDIMENSION left = JDIMENSION(std::max<int64_t>(0, window.left - kJpegColumnMargin));
  JDIMENSION columns = JDIMENSION(
      std::min<int64_t>(result->header.width, window.left + window.width + kJpegColumnMargin) -
      int64_t(left));
  if (columns < decoder->output_width) jpeg_crop_scanline(decoder, &left, &columns);
  result->left = left;
  result->width = decoder->output_width;
  const size_t row_bytes = size_t(decoder->output_width) * size_t(decoder->output_components);
  if (decoder->output_components != result->header.channels ||
      decoder->output_height != decoder->image_height) {
    std::snprintf(result->error, kErrorBytes, "unexpected output layout");
    return false;
  }
  result->pixels = static_cast<uint8_t*>(std::malloc(row_bytes * size_t(window.rows)));
  if (result->pixels == nullptr) {
    std::snprintf(result->error, kErrorBytes, "out of memory");
    return false;
  }
  if (window.top > 0) jpeg_skip_scanlines(decoder, JDIMENSION(window.top));
  while (decoder->output_scanline < JDIMENSION(window.top + window.rows)) {
    JSAMPROW row = result->pixels + size_t(decoder->output_scanline - window.top) * row_bytes;
    jpeg_read_scanlines(decoder, &row, 1);
  }
  if (whole) {
    jpeg_finish_decompress(decoder);
  } else {
    jpeg_abort_decompress(decoder);  // the rows below are not needed
  }
  return true;
}

// `window` NULL: the whole image. Note [Decoding without C++ across longjmp].
bool DecodeJpeg(const uint8_t* data, size_t size, bool header_only, const JpegWindow* window,
                RawDecode* result) {
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
  if (jpeg_read_header(&decoder, TRUE) != JPEG_HEADER_OK) {
    std::snprintf(result->error, kErrorBytes, "the file holds no image");
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  result->header.height = decoder.image_height;
  result->header.width = decoder.image_width;
  if (decoder.jpeg_color_space == JCS_CMYK || decoder.jpeg_color_space == JCS_YCCK) {
    result->unsupported_colour = true;
    jpeg_destroy_decompress(&decoder);
    return false;
  }
  const bool grey = decoder.jpeg_color_space == JCS_GRAYSCALE;
  result->header.channels = grey ? 1 : 3;
  const bool too_large =
      decoder.image_height > kMaxImageSide || decoder.image_width > kMaxImageSide;
  bool decoded = true;
  if (!header_only && !too_large) {  // Decode refuses a too large image by its header
    const JpegWindow whole{0, result->header.height, 0, result->header.width};
    const JpegWindow& asked = window != nullptr ? *window : whole;
    decoder.out_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
    if (asked.top < 0 || asked.left < 0 || asked.rows < 1 || asked.width < 1 ||
        asked.top + asked.rows > result->header.height ||
        asked.left + asked.width > result->header.width) {
      std::snprintf(result->error, kErrorBytes, "the part asked for lies outside the image");
      decoded = false;
    } else {
      decoded = DecodeJpegWindow(&decoder, asked, result);
    }
  }
  jpeg_destroy_decompress(&decoder);
  return decoded;
}

enum class Format { kPng, kJpeg };

Format FormatOf(const std::string& path, const uint8_t* bytes, size_t size) {
  if (size == 0) throw PluginError(DPL_ERR_INVALID_ARGUMENT, path + ": the file is empty");
  if (size >= 8 && std::memcmp(bytes, kPngSignature, 8) == 0) return Format::kPng;
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) {
    return Format::kJpeg;
  }
  std::string start;
  for (size_t i = 0; i < size && i < 4; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", bytes[i]);
    start += hex;
  }
  throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                    path + ": not a PNG or JPEG image (it starts with the bytes " + start + ")");
}

// Decodes the image (its header only, or its pixels: of `window` for a JPEG when not NULL, else
// all of them) and checks it; throws as ReadImageHeader says.
RawDecode Decode(const std::string& path, const uint8_t* data, size_t size, bool header_only,
                 const JpegWindow* window) {
  const Format format = FormatOf(path, data, size);
  RawDecode raw;
  const bool decoded = format == Format::kPng ? DecodePng(data, size, header_only, &raw)
                                              : DecodeJpeg(data, size, header_only, window, &raw);
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(raw.pixels, std::free);
  const char* name = format == Format::kPng ? "PNG" : "JPEG";
  if (raw.unsupported_colour) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      path +
                          ": a CMYK JPEG; only greyscale and RGB images are read (convert it "
                          "to RGB)");
  }
  if (!decoded) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      path + ": the " + name + " image does not decode: " + raw.error);
  }
  const ImageHeader& header = raw.header;
  if (header.height < 1 || header.width < 1 || header.height > kMaxImageSide ||
      header.width > kMaxImageSide) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      path + ": the image is " + std::to_string(header.height) + "x" +
                          std::to_string(header.width) + " (height x width); images of 1 to " +
                          std::to_string(kMaxImageSide) + " pixels a side are read");
  }
  raw.pixels = pixels.release();
  return raw;
}

// The raw decode's pixels (rows x its width x channels) as a vector; frees them.
std::vector<uint8_t> TakePixels(RawDecode* raw, int64_t rows) {
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(raw->pixels, std::free);
  raw->pixels = nullptr;
  if (!pixels) return {};
  return std::vector<uint8_t>(pixels.get(),
                              pixels.get() + size_t(rows * raw->width * raw->header.channels));
}

}  // namespace

ImageHeader ReadImageHeader(const std::string& path, const uint8_t* data, size_t size) {
  return Decode(path, data, size, /*header_only=*/true, nullptr).header;
}

DecodedImage DecodeImage(const std::string& path, const uint8_t* data, size_t size) {
  RawDecode raw = Decode(path, data, size, /*header_only=*/false, nullptr);
  DecodedImage image;
  image.header = raw.header;
  image.pixels = TakePixels(&raw, raw.header.height);
  return image;
}

JpegRegion DecodeJpegRegion(const std::string& path, const uint8_t* data, size_t size,
                            const JpegWindow& window) {
  RawDecode raw = Decode(path, data, size, /*header_only=*/false, &window);
  JpegRegion region;
  region.image = raw.header;
  region.left = raw.left;
  region.width = raw.width;
  region.pixels = TakePixels(&raw, window.rows);
  return region;
}

}  // namespace dpl::datasets::images
