#include "webdataset_options.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "common/image_decode.hpp"
#include "common/labels.hpp"
#include "dpl/support/error.hpp"

namespace dpl::datasets::webdataset {
namespace {

using support::Require;

constexpr int kMaxThreads = 256;
constexpr int64_t kMaxBlock = int64_t{1} << 24;

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, kListSeparator);) items.push_back(item);
  return items;
}

// input=EXT[:EXT...]: lower-case extensions without a leading dot or a slash.
std::vector<std::string> ReadExtensions(const support::KeyValueOptions& options,
                                        const std::string& defaults) {
  const std::string text = options.GetString("input", defaults);
  std::vector<std::string> extensions = SplitList(text);
  const std::string invalid =
      "option \"input\" expects member extensions separated by ':' "
      "(e.g. input=jpg:png), got \"" +
      text + "\"";
  Require(!extensions.empty() && text.back() != kListSeparator, invalid);
  for (std::string& extension : extensions) {
    Require(!extension.empty() && extension[0] != '.' && extension.find('/') == std::string::npos,
            invalid);
    for (char& c : extension) c = char(std::tolower(static_cast<unsigned char>(c)));
  }
  return extensions;
}

// size=S or size=HxW.
void ReadSize(const support::KeyValueOptions& options, WebDatasetOptions* read) {
  if (!options.Has("size")) return;
  const std::string text = options.GetString("size", "");
  const std::string invalid = "option \"size\" expects S or HxW of 1 to " +
                              std::to_string(images::kMaxImageSide) +
                              " pixels, e.g. size=224 or size=224x192, got \"" + text + "\"";
  auto side = [&](const std::string& digits) {
    Require(!digits.empty() && digits.size() <= 6 &&
                digits.find_first_not_of("0123456789") == std::string::npos,
            invalid);
    const int64_t value = std::stoll(digits);
    Require(value >= 1 && value <= images::kMaxImageSide, invalid);
    return value;
  };
  const size_t x = text.find('x');
  read->height = side(text.substr(0, x));
  read->width = x == std::string::npos ? read->height : side(text.substr(x + 1));
}

// scale=LOW:HIGH and ratio=LOW:HIGH.
void ReadRange(const support::KeyValueOptions& options, const std::string& key, double upper,
               double* low, double* high) {
  if (!options.Has(key)) return;
  const std::string text = options.GetString(key, "");
  const std::vector<std::string> ends = SplitList(text);
  const std::string invalid = "option \"" + key + "\" expects LOW:HIGH with 0 < LOW <= HIGH" +
                              (upper > 0 ? " <= 1" : "") + ", got \"" + text + "\"";
  Require(ends.size() == 2, invalid);
  try {
    size_t used_low = 0, used_high = 0;
    *low = std::stod(ends[0], &used_low);
    *high = std::stod(ends[1], &used_high);
    Require(used_low == ends[0].size() && used_high == ends[1].size(), invalid);
  } catch (const std::logic_error&) {
    Require(false, invalid);
  }
  Require(*low > 0 && *low <= *high && (upper <= 0 || *high <= upper), invalid);
}

// label=cls (default), label=EXT (another member of decimal text) or label=json:FIELD.
void ReadLabel(const support::KeyValueOptions& options, SampleLayout* layout) {
  const std::string text = options.GetString("label", "cls");
  Require(!text.empty() && text[0] != '.' && text.find('/') == std::string::npos &&
              text != "json" && text != "json:",
          "option \"label\" expects cls, another member extension, or json:FIELD (the integer "
          "field of the sample's .json), got \"" +
              text + "\"");
  if (text.rfind("json:", 0) == 0) {
    layout->label_extension = "json";
    layout->json_field = text.substr(5);
  } else {
    layout->label_extension = text;
  }
}

void ReadImageOptions(const support::KeyValueOptions& options, WebDatasetOptions* read) {
  read->layout.input_extensions = ReadExtensions(options, "jpg:jpeg:png:webp");
  ReadLabel(options, &read->layout);
  read->transform = ReadTransformOptions(options, /*images=*/false);
  read->flip = options.GetChoice("flip", "none", {"none", "horizontal"}) == "horizontal";
  const std::string channels = options.GetChoice("channels", "auto", {"auto", "1", "3"});
  read->channels = channels == "auto" ? 0 : std::stoll(channels);
  ReadSize(options, read);
  const bool sized = read->height > 0;
  for (const char* key : {"train_crop", "scale", "ratio", "resize"}) {
    Require(sized || !options.Has(key),
            std::string("option \"") + key + "\" needs size=S (the samples' size) as well");
  }
  read->train_crop =
      options.GetChoice("train_crop", "random_resized", {"random_resized", "center"}) == "center"
          ? ImageCrop::kCenter
          : ImageCrop::kRandomResized;
  ReadRange(options, "scale", 1.0, &read->ranges.scale_low, &read->ranges.scale_high);
  ReadRange(options, "ratio", 0.0, &read->ranges.ratio_low, &read->ranges.ratio_high);
  const int64_t larger = std::max(read->height, read->width);
  read->resize_shorter = options.GetInt("resize", (larger * 8 + 6) / 7);
  Require(
      !sized || (read->resize_shorter >= larger && read->resize_shorter <= images::kMaxImageSide),
      "option \"resize\" (the shorter side before the center crop) must be at least the "
      "size's larger side " +
          std::to_string(larger) + " and at most " + std::to_string(images::kMaxImageSide) +
          ", got " + std::to_string(read->resize_shorter));
}

void ReadTokenOptions(const support::KeyValueOptions& options, WebDatasetOptions* read) {
  read->layout.input_extensions = ReadExtensions(options, "npy:bin");
  read->block = options.GetInt("block", 0);
  Require(read->block >= 1 && read->block <= kMaxBlock,
          "option \"block\" (the ids of a sample's input; its target is the next ones) is "
          "required for sample=tokens, 1 to " +
              std::to_string(kMaxBlock) + ", got " + std::to_string(read->block));
  read->vocab = options.GetInt("vocab", 0);
  Require(read->vocab >= 0,
          "option \"vocab\" must be positive, got " + std::to_string(read->vocab));
  read->token_dtype = options.GetChoice("dtype", "uint16", {"uint16", "uint32", "int32", "int64"});
  read->layout.input_reading = "dtype=" + read->token_dtype;
}

}  // namespace

WebDatasetOptions ReadWebDatasetOptions(const support::KeyValueOptions& options) {
  WebDatasetOptions read;
  read.train_shards = options.GetString("shards", "");
  read.validation_shards = options.GetString("val_shards", "");
  read.kind = options.GetChoice("sample", "image", {"image", "tokens"}) == "tokens"
                  ? SampleKind::kTokens
                  : SampleKind::kImage;
  read.classes = ReadClassesOption(options);
  read.threads = int(options.GetInt("threads", 0));
  Require(read.threads >= 0 && read.threads <= kMaxThreads,
          "option \"threads\" (decoding threads) must be 1 to " + std::to_string(kMaxThreads) +
              ", or 0 for the worker's own (the default), got " + std::to_string(read.threads));
  const std::vector<const char*> image_only = {"label",    "mean",   "std",        "flip",
                                               "channels", "size",   "train_crop", "scale",
                                               "ratio",    "resize", "classes"};
  const std::vector<const char*> tokens_only = {"block", "vocab", "dtype"};
  const bool tokens = read.kind == SampleKind::kTokens;
  for (const char* key : tokens ? image_only : tokens_only) {
    Require(!options.Has(key), std::string("option \"") + key +
                                   "\" is for sample=" + (tokens ? "image" : "tokens") + " data");
  }
  if (tokens) {
    ReadTokenOptions(options, &read);
  } else {
    ReadImageOptions(options, &read);
  }
  return read;
}

}  // namespace dpl::datasets::webdataset
