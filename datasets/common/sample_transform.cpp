#include "common/sample_transform.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/augment_random.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets {
namespace {

using support::Require;

std::vector<float> ParseFloatList(const support::KeyValueOptions& options, const std::string& key) {
  const std::string text = options.GetString(key, "");
  std::vector<float> values;
  if (text.empty()) return values;
  const std::string invalid = "option \"" + key + "\" expects numbers separated by '" +
                              std::string(1, kListSeparator) + "' (e.g. " + key +
                              "=0.5:0.5:0.5), got \"" + text + "\"";
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, kListSeparator)) {
    char* end = nullptr;
    errno = 0;
    const float value = std::strtof(item.c_str(), &end);
    Require(
        !item.empty() && end == item.c_str() + item.size() && errno == 0 && std::isfinite(value),
        invalid);
    values.push_back(value);
  }
  Require(text.back() != kListSeparator, invalid);
  return values;
}

}  // namespace

const char* SourceTypeName(SourceType type) {
  switch (type) {
    case SourceType::kUInt8:
      return "uint8";
    case SourceType::kFloat32:
      return "float32";
    case SourceType::kInt64:
      return "int64";
  }
  return "unknown";
}

size_t SourceTypeSize(SourceType type) {
  switch (type) {
    case SourceType::kUInt8:
      return 1;
    case SourceType::kFloat32:
      return 4;
    case SourceType::kInt64:
      return 8;
  }
  return 0;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + ")";
}

TransformOptions ReadTransformOptions(const support::KeyValueOptions& options, bool images) {
  TransformOptions result;
  result.normalisation.mean = ParseFloatList(options, "mean");
  result.normalisation.std = ParseFloatList(options, "std");
  for (const float value : result.normalisation.std) {
    Require(value > 0,
            "option \"std\" values must be positive, got \"" + options.GetString("std", "") + "\"");
  }
  if (images) {
    result.flip_horizontal = options.GetChoice("flip", "none", {"none", "horizontal"}) != "none";
    result.crop_padding = options.GetInt("crop", 0);
    Require(result.crop_padding >= 0 && result.crop_padding <= kMaxCropPadding,
            "option \"crop\" expects a padding of 0 to " + std::to_string(kMaxCropPadding) +
                " pixels, got " + std::to_string(result.crop_padding));
  }
  return result;
}

SampleTransform::SampleTransform(const TransformOptions& options, const Normalisation& defaults,
                                 std::vector<int64_t> sample_shape, SourceType source, bool augment,
                                 uint64_t seed, const std::string& data_name)
    : sample_shape_(std::move(sample_shape)), source_(source), seed_(seed) {
  const size_t rank = sample_shape_.size();
  for (const int64_t extent : sample_shape_) elements_ *= extent;
  channels_ = rank >= 3 ? sample_shape_[0] : 1;
  height_ = rank >= 2 ? sample_shape_[rank - 2] : 1;
  width_ = rank >= 1 ? sample_shape_[rank - 1] : 1;
  Require(elements_ > 0 && rank >= 1,
          "the samples of " + data_name + " are empty (shape " + ShapeText(sample_shape_) + ")");
  planes_per_channel_ = elements_ / (height_ * width_) / channels_;

  const bool wants_augmentation = options.flip_horizontal || options.crop_padding > 0;
  Require(!wants_augmentation || rank >= 2,
          std::string("option \"") + (options.crop_padding > 0 ? "crop" : "flip") +
              "\" needs samples with a height and a width (2 or more axes), but the samples of " +
              data_name + " have shape " + ShapeText(sample_shape_));
  if (augment) {
    flip_ = options.flip_horizontal;
    crop_padding_ = options.crop_padding;
  }

  auto per_channel = [&](const std::vector<float>& given, const std::vector<float>& fallback,
                         const char* key) {
    const std::vector<float>& values = given.empty() ? fallback : given;
    Require(values.size() == 1 || int64_t(values.size()) == channels_,
            std::string("option \"") + key + "\" has " + std::to_string(values.size()) +
                " values but the samples of " + data_name + " have " + std::to_string(channels_) +
                " channel" + (channels_ == 1 ? "" : "s") + "; give one value, or one per channel");
    return values.size() == 1 ? std::vector<float>(size_t(channels_), values[0]) : values;
  };
  mean_ = per_channel(options.normalisation.mean, defaults.mean, "mean");
  std_ = per_channel(options.normalisation.std, defaults.std, "std");

  if (source_ == SourceType::kUInt8) {
    const float scale = 1.0f / 255.0f;
    uint8_table_.resize(size_t(channels_) * 256);
    for (int64_t c = 0; c < channels_; ++c) {
      for (int v = 0; v < 256; ++v) {
        uint8_table_[size_t(c * 256 + v)] = (float(v) * scale - mean_[c]) / std_[c];
      }
    }
  }
}

template <typename Value>
void SampleTransform::ApplyWith(const Value& value, int64_t index, int64_t epoch,
                                float* out) const {
  const int64_t plane_size = height_ * width_;
  const int64_t planes = elements_ / plane_size;
  if (!flip_ && crop_padding_ == 0) {
    for (int64_t p = 0; p < planes; ++p) {
      const int64_t c = p / planes_per_channel_;
      for (int64_t e = p * plane_size; e < (p + 1) * plane_size; ++e) out[e] = value(e, c);
    }
    return;
  }
  const SampleAugmentation draw = DrawAugmentation(seed_, epoch, index, crop_padding_);
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t c = p / planes_per_channel_;
    const float padding =
        source_ == SourceType::kUInt8 ? uint8_table_[size_t(c * 256)] : (0.0f - mean_[c]) / std_[c];
    for (int64_t y = 0; y < height_; ++y) {
      float* row = out + p * plane_size + y * width_;
      const int64_t source_y = y + draw.top - crop_padding_;
      for (int64_t x = 0; x < width_; ++x) {
        const int64_t source_x = (draw.flip ? width_ - 1 - x : x) + draw.left - crop_padding_;
        const bool inside =
            source_y >= 0 && source_y < height_ && source_x >= 0 && source_x < width_;
        row[x] = inside ? value(p * plane_size + source_y * width_ + source_x, c) : padding;
      }
    }
  }
}

void SampleTransform::Apply(const void* source, int64_t index, int64_t epoch, float* out) const {
  const auto* bytes = static_cast<const uint8_t*>(source);
  switch (source_) {
    case SourceType::kUInt8: {
      const float* table = uint8_table_.data();
      ApplyWith([&](int64_t e, int64_t c) { return table[c * 256 + bytes[e]]; }, index, epoch, out);
      return;
    }
    case SourceType::kFloat32:
      ApplyWith(
          [&](int64_t e, int64_t c) {
            float v;
            std::memcpy(&v, bytes + e * 4, 4);
            return (v - mean_[size_t(c)]) / std_[size_t(c)];
          },
          index, epoch, out);
      return;
    case SourceType::kInt64:
      ApplyWith(
          [&](int64_t e, int64_t c) {
            int64_t v;
            std::memcpy(&v, bytes + e * 8, 8);
            return (float(v) - mean_[size_t(c)]) / std_[size_t(c)];
          },
          index, epoch, out);
      return;
  }
}

}  // namespace dpl::datasets
