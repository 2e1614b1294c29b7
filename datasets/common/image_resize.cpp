#include "common/image_resize.hpp"

#include <algorithm>
#include <cmath>

namespace dpl::datasets::images {
namespace {

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

}  // namespace

ResampleCoefficients BilinearCoefficients(int64_t in_size, int64_t out_size) {
  const double scale = double(float(in_size)) / double(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;
  ResampleCoefficients result;
  result.taps = int64_t(std::ceil(support)) * 2 + 1;
  result.first.resize(size_t(out_size));
  result.count.resize(size_t(out_size));
  result.weights.assign(size_t(out_size * result.taps), 0);
  std::vector<double> k(size_t(result.taps));
  for (int64_t out = 0; out < out_size; ++out) {
    const double center = (double(out) + 0.5) * scale;
    const double inverse = 1.0 / filter_scale;
    int64_t first = int64_t(center - support + 0.5);  // truncation toward zero, as Pillow's (int)
    if (first < 0) first = 0;
    int64_t last = int64_t(center + support + 0.5);
    if (last > in_size) last = in_size;
    const int64_t count = last - first;
    double total = 0.0;
    for (int64_t x = 0; x < count; ++x) {
      k[size_t(x)] = Triangle((double(x + first) - center + 0.5) * inverse);
      total += k[size_t(x)];
    }
    for (int64_t x = 0; x < count; ++x) {
      double w = k[size_t(x)];
      if (total != 0.0) w /= total;
      result.weights[size_t(out * result.taps + x)] =
          w < 0 ? int32_t(-0.5 + w * (1 << kResamplePrecisionBits))
                : int32_t(0.5 + w * (1 << kResamplePrecisionBits));
    }
    result.first[size_t(out)] = first;
    result.count[size_t(out)] = count;
  }
  return result;
}

namespace {

uint8_t Clip8(int32_t sum) {
  const int32_t value = sum >> kResamplePrecisionBits;
  return uint8_t(std::clamp(value, 0, 255));
}

// One pass along rows (`along_rows`) or columns, every channel alike.
DecodedImage ResamplePass(const DecodedImage& in, int64_t out_height, int64_t out_width,
                          bool along_rows) {
  const int64_t channels = in.header.channels;
  const ResampleCoefficients c = along_rows ? BilinearCoefficients(in.header.width, out_width)
                                            : BilinearCoefficients(in.header.height, out_height);
  DecodedImage out;
  out.header = {out_height, out_width, channels};
  out.pixels.resize(size_t(out_height * out_width * channels));
  for (int64_t y = 0; y < out_height; ++y) {
    for (int64_t x = 0; x < out_width; ++x) {
      const int64_t position = along_rows ? x : y;
      const int32_t* k = c.weights.data() + position * c.taps;
      for (int64_t ch = 0; ch < channels; ++ch) {
        int32_t sum = 1 << (kResamplePrecisionBits - 1);
        for (int64_t t = 0; t < c.count[size_t(position)]; ++t) {
          const int64_t source = c.first[size_t(position)] + t;
          const int64_t sy = along_rows ? y : source, sx = along_rows ? source : x;
          sum += int32_t(in.pixels[size_t((sy * in.header.width + sx) * channels + ch)]) * k[t];
        }
        out.pixels[size_t((y * out_width + x) * channels + ch)] = Clip8(sum);
      }
    }
  }
  return out;
}

}  // namespace

DecodedImage ConvertChannels(DecodedImage image, int64_t channels) {
  if (image.header.channels == channels) return image;
  const size_t pixels = size_t(image.header.height * image.header.width);
  std::vector<uint8_t> converted(pixels * size_t(channels));
  if (channels == 3) {
    for (size_t p = 0; p < pixels; ++p) {
      converted[3 * p] = converted[3 * p + 1] = converted[3 * p + 2] = image.pixels[p];
    }
  } else {
    for (size_t p = 0; p < pixels; ++p) {
      const uint32_t r = image.pixels[3 * p], g = image.pixels[3 * p + 1],
                     b = image.pixels[3 * p + 2];
      converted[p] = uint8_t((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
    }
  }
  image.pixels = std::move(converted);
  image.header.channels = channels;
  return image;
}

DecodedImage Resize(DecodedImage image, int64_t height, int64_t width) {
  if (image.header.width != width) {
    image = ResamplePass(image, image.header.height, width, /*along_rows=*/true);
  }
  if (image.header.height != height) {
    image = ResamplePass(image, height, width, /*along_rows=*/false);
  }
  return image;
}

}  // namespace dpl::datasets::images
