// The imagefolder dataset plugin: <path>/<split>/<class>/*.png|jpg|jpeg as torchvision's
// ImageFolder reads it (folder_listing.hpp), decoded as Pillow decodes (image_decode.hpp),
// converted to the wanted channels and resized with Pillow's arithmetic (image_resize.hpp).
//
// Note [Decoded once or per batch]: when the decoded split (count x C x H x W bytes) fits in
// cache_mb, every image is decoded at create, on up to num_threads threads, into one buffer that
// fill only normalises from; with a cache folder the buffer is also written there (Note [Data
// cache], keyed by every image's path, size and modification time and by the channels and size
// asked for), and later runs read it instead of decoding. A split too large for that has only
// its headers read at create (each image's size checked) and is decoded per batch in fill.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/data_cache.hpp"
#include "common/files.hpp"
#include "common/image_decode.hpp"
#include "common/image_resize.hpp"
#include "common/parallel.hpp"
#include "common/plugin.hpp"
#include "common/sample_transform.hpp"
#include "common/transformed_dataset.hpp"
#include "folder_listing.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::OpenRequest;
using dpl::datasets::SharedBytes;
using dpl::datasets::imagefolder::FolderListing;
using dpl::datasets::images::DecodedImage;
using dpl::datasets::images::ImageHeader;
using dpl::support::PluginError;
using dpl::support::Require;

constexpr int64_t kDefaultCacheMegabytes = 2048;
constexpr char kCacheMagic[8] = {'D', 'P', 'L', 'I', 'M', 'F', '0', '1'};

// The head of a decoded split in the data cache, followed by count * C * H * W pixel bytes.
struct CacheHeader {
  char magic[8];
  uint64_t key_hash;  // StableHash of the entry's key
  int64_t count;
  int64_t channels;
  int64_t height;
  int64_t width;
};

struct Options {
  dpl::datasets::TransformOptions transform;
  int64_t channels = 0;       // 0: the first image's
  int64_t resize_height = 0;  // 0: no resize
  int64_t resize_width = 0;
  int64_t cache_megabytes = kDefaultCacheMegabytes;
};

void ParseResize(const std::string& text, Options* options) {
  const std::string invalid = "option \"resize\" expects HEIGHTxWIDTH of 1 to " +
                              std::to_string(dpl::datasets::images::kMaxImageSide) +
                              " pixels each, e.g. resize=32x32, got \"" + text + "\"";
  const size_t x = text.find('x');
  Require(x != std::string::npos && x > 0 && x + 1 < text.size(), invalid);
  auto side = [&](const std::string& digits) {
    Require(digits.size() <= 6 && digits.find_first_not_of("0123456789") == std::string::npos,
            invalid);
    const int64_t value = std::stoll(digits);
    Require(value >= 1 && value <= dpl::datasets::images::kMaxImageSide, invalid);
    return value;
  };
  options->resize_height = side(text.substr(0, x));
  options->resize_width = side(text.substr(x + 1));
}

std::string SizeText(int64_t height, int64_t width) {
  return std::to_string(height) + "x" + std::to_string(width);
}

// Reads, decodes, converts and resizes the images of a listing into C x H x W samples.
class ImageLoader {
 public:
  ImageLoader(FolderListing listing, int64_t channels, int64_t height, int64_t width, bool resize)
      : listing_(std::move(listing)),
        channels_(channels),
        height_(height),
        width_(width),
        resize_(resize) {}

  const FolderListing& listing() const { return listing_; }
  int64_t SampleBytes() const { return channels_ * height_ * width_; }

  // Checks image `index`'s header: it decodes, and without resize has the first image's size.
  void CheckHeader(int64_t index) const {
    const std::string& path = Path(index);
    const SharedBytes bytes = dpl::datasets::ReadWholeFile(path);
    CheckSize(index, dpl::datasets::images::ReadImageHeader(path, bytes.data(), bytes.size()));
  }

  // Writes image `index` as C x H x W bytes to out[0 .. SampleBytes()).
  void Load(int64_t index, uint8_t* out) const {
    const std::string& path = Path(index);
    const SharedBytes bytes = dpl::datasets::ReadWholeFile(path);
    DecodedImage image = dpl::datasets::images::DecodeImage(path, bytes.data(), bytes.size());
    CheckSize(index, image.header);
    image = dpl::datasets::images::ConvertChannels(std::move(image), channels_);
    if (resize_) image = dpl::datasets::images::Resize(std::move(image), height_, width_);
    const int64_t plane = height_ * width_;
    for (int64_t p = 0; p < plane; ++p) {
      for (int64_t c = 0; c < channels_; ++c) {
        out[c * plane + p] = image.pixels[size_t(p * channels_ + c)];
      }
    }
  }

 private:
  const std::string& Path(int64_t index) const { return listing_.images[size_t(index)].path; }

  void CheckSize(int64_t index, const ImageHeader& header) const {
    if (resize_ || (header.height == height_ && header.width == width_)) return;
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      Path(index) + ": the image is " + SizeText(header.height, header.width) +
                          " (height x width) but " + Path(0) + " is " + SizeText(height_, width_) +
                          "; all images must have one size, or pass --data-options "
                          "resize=HxW");
  }

  FolderListing listing_;
  int64_t channels_;
  int64_t height_;
  int64_t width_;
  bool resize_;
};

std::string CacheKey(const ImageLoader& loader, int64_t channels, int64_t height, int64_t width,
                     bool resize) {
  std::string key = "imagefolder decoded v1|" + std::to_string(channels) + "|" +
                    SizeText(height, width) + (resize ? "|resized" : "|as stored");
  for (const auto& image : loader.listing().images) {
    key += "\n" + std::to_string(image.label) + "|" + dpl::datasets::SourceKey(image.path);
  }
  return key;
}

// The decoded split from the cache entry at `path`, or empty bytes when it is missing or not
// exactly the entry this key and shape need (a bad one is reported and rebuilt).
SharedBytes ReadCacheEntry(const std::string& path, const CacheHeader& expected,
                           const OpenRequest& request) {
  if (!dpl::datasets::IsRegularFile(path)) return {};
  try {
    const SharedBytes bytes = dpl::datasets::ReadWholeFile(path);
    const uint64_t pixel_bytes =
        uint64_t(expected.count * expected.channels * expected.height * expected.width);
    CacheHeader header{};
    if (bytes.size() >= sizeof header) std::memcpy(&header, bytes.data(), sizeof header);
    if (bytes.size() != sizeof header + pixel_bytes ||
        std::memcmp(&header, &expected, sizeof header) != 0) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "not the entry of these images");
    }
    return SharedBytes(bytes.owner(), bytes.data() + sizeof header, size_t(pixel_bytes));
  } catch (const PluginError& error) {
    request.log.Warning("ignoring the data cache entry " + path + " (" + error.what() +
                        "); decoding the images again");
    return {};
  }
}

class ImageFolderDataset : public dpl::datasets::TransformedDataset {
 public:
  ImageFolderDataset(ImageLoader loader, SharedBytes decoded, int64_t classes,
                     dpl::datasets::SampleTransform transform, int num_threads)
      : TransformedDataset(std::move(transform), int64_t(loader.listing().images.size()), classes,
                           num_threads),
        loader_(std::move(loader)),
        decoded_(std::move(decoded)) {}

  void FillSamples(const int64_t* indices, int64_t n, int64_t epoch, float* input,
                   int64_t* labels) override {
    if (decoded_.data() != nullptr) {
      TransformedDataset::FillSamples(indices, n, epoch, input, labels);
      return;
    }
    const int64_t elements = SampleElements();
    dpl::datasets::ParallelFor(num_threads(), n, [&](int64_t i) {
      const int64_t index = indices[i];
      labels[i] = LabelAt(index);
      std::vector<uint8_t> sample(static_cast<size_t>(elements));
      try {
        loader_.Load(index, sample.data());
      } catch (const PluginError& error) {
        throw PluginError(DPL_ERR_IO, std::string(error.what()) + " (sample " +
                                          std::to_string(index) + ", decoded per batch)");
      }
      transform().Apply(sample.data(), index, epoch, input + i * elements);
    });
  }

 private:
  // The decoded split in memory (Note [Decoded once or per batch]).
  const void* SampleAt(int64_t index) const override {
    return decoded_.data() + index * SampleElements();
  }
  int64_t LabelAt(int64_t index) const override {
    return loader_.listing().images[size_t(index)].label;
  }

  ImageLoader loader_;
  SharedBytes decoded_;  // Note [Decoded once or per batch]; empty: decoded per batch
};

// Decodes every image of the split (or reads them from the cache), Note [Decoded once or per
// batch].
SharedBytes DecodeAll(const ImageLoader& loader, const CacheHeader& header, const std::string& key,
                      const OpenRequest& request) {
  const std::string entry =
      request.cache_dir.empty()
          ? ""
          : dpl::datasets::CacheEntryPath(request.cache_dir, key,
                                          std::string("imagefolder-") + request.split_name());
  if (!entry.empty()) {
    SharedBytes cached = ReadCacheEntry(entry, header, request);
    if (cached.data() != nullptr) return cached;
  }
  const auto start = std::chrono::steady_clock::now();
  const int64_t sample_bytes = loader.SampleBytes();
  auto pixels = std::make_shared<std::vector<uint8_t>>(size_t(header.count * sample_bytes));
  dpl::datasets::ParallelFor(request.num_threads, header.count,
                             [&](int64_t i) { loader.Load(i, pixels->data() + i * sample_bytes); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  request.log.Info("decoded " + std::to_string(header.count) + " images of " +
                   loader.listing().split_folder + " in " + std::to_string(seconds) + " s");
  if (!entry.empty()) {
    try {
      dpl::datasets::WriteFileAtomically(entry, &header, sizeof header, pixels->data(),
                                         pixels->size());
    } catch (const PluginError& error) {
      request.log.Warning(std::string("data cache: ") + error.what() +
                          "; training goes on, the next run decodes the images again "
                          "(--data-cache none turns the cache off)");
    }
  }
  const uint8_t* data = pixels->data();
  const size_t size = pixels->size();
  return SharedBytes(std::move(pixels), data, size);
}

struct ImageFolderTraits {
  static constexpr char kName[] = "imagefolder";
  using Options = ::Options;

  static Options ReadOptions(const dpl::support::KeyValueOptions& options) {
    Options read;
    read.transform = dpl::datasets::ReadTransformOptions(options, /*images=*/true);
    const std::string channels = options.GetChoice("channels", "auto", {"auto", "1", "3"});
    read.channels = channels == "auto" ? 0 : std::stoll(channels);
    if (options.Has("resize")) ParseResize(options.GetString("resize", ""), &read);
    read.cache_megabytes = options.GetInt("cache_mb", kDefaultCacheMegabytes);
    Require(read.cache_megabytes >= 0,
            "option \"cache_mb\" must be 0 or more, got " + std::to_string(read.cache_megabytes));
    return read;
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    FolderListing listing =
        dpl::datasets::imagefolder::ListImageFolder(request.path, request.split_name());
    const std::string first = listing.images.front().path;
    const SharedBytes first_bytes = dpl::datasets::ReadWholeFile(first);
    const ImageHeader reference =
        dpl::datasets::images::ReadImageHeader(first, first_bytes.data(), first_bytes.size());
    const bool resize = options.resize_height > 0;
    CacheHeader header{};
    std::memcpy(header.magic, kCacheMagic, sizeof header.magic);
    header.count = int64_t(listing.images.size());
    header.channels = options.channels > 0 ? options.channels : reference.channels;
    header.height = resize ? options.resize_height : reference.height;
    header.width = resize ? options.resize_width : reference.width;
    const int64_t classes = int64_t(listing.classes.size());
    const std::string split_folder = listing.split_folder;
    ImageLoader loader(std::move(listing), header.channels, header.height, header.width, resize);

    dpl::datasets::SampleTransform transform(
        options.transform, {{0.0f}, {1.0f}}, {header.channels, header.height, header.width},
        dpl::datasets::SourceType::kUInt8, request.train(), request.seed, split_folder);
    const uint64_t decoded_bytes = uint64_t(header.count) * uint64_t(loader.SampleBytes());
    SharedBytes decoded;
    if (decoded_bytes <= uint64_t(options.cache_megabytes) << 20) {
      const std::string key =
          CacheKey(loader, header.channels, header.height, header.width, resize);
      header.key_hash = dpl::datasets::StableHash(key);
      decoded = DecodeAll(loader, header, key, request);
    } else {
      dpl::datasets::ParallelFor(request.num_threads, header.count,
                                 [&](int64_t i) { loader.CheckHeader(i); });
      request.log.Info(split_folder + ": " + std::to_string(decoded_bytes >> 20) +
                       " MiB decoded exceed cache_mb=" + std::to_string(options.cache_megabytes) +
                       "; images are decoded per batch");
    }
    return std::make_unique<ImageFolderDataset>(std::move(loader), std::move(decoded), classes,
                                                std::move(transform), request.num_threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 imagefolder_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 imagefolder_dataset_plugin =
    dpl::datasets::PluginTable<ImageFolderTraits>(
        "1.0.0",
        "a folder of PNG and JPEG images, <split>/<class>/<image> (torchvision's "
        "ImageFolder)");
