// The webdataset dataset plugin: WebDataset shards (uncompressed tar files of samples) read in
// place. create indexes the split's shards (Note [Shard index]; once, into the data cache) and
// checks what the index can tell: every sample has its input and label, labels are integers in
// range, images have a readable header (and, without size=, one size). fill reads each sample's
// member with one pread and decodes it on the plugin's threads (image_sample.hpp: crop, resize,
// flip and normalisation on the fly, drawn per (seed, epoch, sample index)), or cuts token ids
// (token_sample.hpp).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/image_decode.hpp"
#include "common/labels.hpp"
#include "common/parallel.hpp"
#include "common/plugin.hpp"
#include "common/sample_transform.hpp"
#include "dpl/support/error.hpp"
#include "image_region.hpp"
#include "image_sample.hpp"
#include "shard_list.hpp"
#include "shard_set.hpp"
#include "token_sample.hpp"
#include "webdataset_options.hpp"

namespace {

using dpl::datasets::Dataset;
using dpl::datasets::OpenRequest;
using dpl::datasets::SampleTensor;
using dpl::datasets::webdataset::ImageCrop;
using dpl::datasets::webdataset::ImageSampleSpec;
using dpl::datasets::webdataset::InputInfo;
using dpl::datasets::webdataset::SampleKind;
using dpl::datasets::webdataset::ShardSet;
using dpl::datasets::webdataset::TarMember;
using dpl::datasets::webdataset::WebDatasetOptions;
using dpl::support::PluginError;
using dpl::support::Require;

// Note [A JPEG cut short]: a JPEG whose data stops early keeps its whole header, so the index
// took it and the fill failed only once a crop reached its missing rows, perhaps epochs into a
// run. Pillow refuses such a file when it loads it; here the index does. A JPEG ends with its EOI
// marker (FF D9); one that does not is decoded whole, once, at indexing (bytes after the marker,
// which some cameras append, decode fine and are kept, as Pillow keeps them), and refused naming
// its member when it does not decode.
void RefuseJpegCutShort(const dpl::datasets::webdataset::ShardFile& shard, const TarMember& member,
                        const std::string& what, std::vector<uint8_t> whole) {
  // The member's bytes are read from the shard at most once: its head may hold all of them, and
  // InspectImage may have read them (`whole`, else empty).
  const uint8_t* bytes = member.head_size == member.size ? member.head
                         : whole.empty()                 ? nullptr
                                                         : whole.data();
  uint8_t tail[2] = {0, 0};
  if (member.size >= 2) {
    if (bytes != nullptr) {
      std::copy(bytes + member.size - 2, bytes + member.size, tail);
    } else {
      shard.ReadSome(member.data_offset + member.size - 2, 2, tail);
    }
  }
  if (tail[0] == 0xFF && tail[1] == 0xD9) return;
  if (bytes == nullptr) {
    whole.resize(size_t(member.size));
    shard.ReadSome(member.data_offset, whole.size(), whole.data());
    bytes = whole.data();
  }
  try {
    dpl::datasets::images::DecodeImage(what, bytes, size_t(member.size));
  } catch (const PluginError& error) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      std::string(error.what()) +
                          " (its data stops before its end: write the shard again from a whole "
                          "copy of the image, or leave the sample out)");
  }
}

// Reads an image member's header when its shard is indexed: from the start of its data, or,
// when the header lies further in (large metadata before a JPEG's frame), from all of it.
InputInfo InspectImage(const dpl::datasets::webdataset::ShardFile& shard, const TarMember& member,
                       const std::string&) {
  namespace wds = dpl::datasets::webdataset;
  const std::string what = shard.path() + ": member " + member.name;
  const wds::ImageFormat format = wds::ImageFormatOf(what, member.head, member.head_size);
  dpl::datasets::images::ImageHeader header;
  std::vector<uint8_t> whole;  // the member's bytes, when its head is not enough
  try {
    header = wds::ReadImageHeaderOf(what, format, member.head, member.head_size);
  } catch (const PluginError&) {
    if (member.head_size == member.size) throw;
    whole.resize(size_t(member.size));
    shard.ReadSome(member.data_offset, whole.size(), whole.data());
    header = wds::ReadImageHeaderOf(what, format, whole.data(), whole.size());
  }
  if (format == wds::ImageFormat::kJpeg) RefuseJpegCutShort(shard, member, what, std::move(whole));
  InputInfo info;
  info.data_offset = member.data_offset;
  info.data_size = member.size;
  info.format = uint16_t(format);
  info.channels = uint16_t(header.channels);
  info.height = uint32_t(header.height);
  info.width = uint32_t(header.width);
  return info;
}

// The split's shards: from its pattern option, or its folder of --data-dir.
std::vector<std::string> SplitShards(const OpenRequest& request, const WebDatasetOptions& options) {
  namespace wds = dpl::datasets::webdataset;
  if (request.train()) {
    return options.train_shards.empty()
               ? wds::ShardsOfFolder(request.path, {"train"}, "shards")
               : wds::ShardsOfPattern(request.path, options.train_shards, "shards");
  }
  return options.validation_shards.empty()
             ? wds::ShardsOfFolder(request.path, {"val", "test"}, "val_shards")
             : wds::ShardsOfPattern(request.path, options.validation_shards, "val_shards");
}

// Image samples: float32 (C, H, W) and one int64 label.
class ImageShardDataset : public Dataset {
 public:
  ImageShardDataset(std::unique_ptr<ShardSet> shards, ImageSampleSpec spec, int64_t classes,
                    int threads)
      : Dataset(SampleTensor::Float32({spec.channels, spec.height, spec.width}),
                SampleTensor::Int64({}), shards->count(), classes),
        shards_(std::move(shards)),
        spec_(std::move(spec)),
        threads_(threads) {}

  void Fill(const int64_t* indices, int64_t n, int64_t epoch, void* input, void* target) override {
    auto* out = static_cast<float*>(input);
    auto* labels = static_cast<int64_t*>(target);
    const int64_t elements = SampleElements();
    dpl::datasets::ParallelFor(threads_, n, [&](int64_t i) {
      const int64_t index = indices[i];
      const ShardSet::Sample sample = shards_->Locate(index);
      labels[i] = sample.record->label;
      thread_local std::vector<uint8_t> bytes;
      ShardSet::ReadInput(sample, &bytes);
      try {
        dpl::datasets::webdataset::WriteImageSample(
            spec_, ShardSet::Describe(sample), bytes.data(), bytes.size(), sample.record->height,
            sample.record->width, index, epoch, out + i * elements);
      } catch (const PluginError& error) {
        throw PluginError(DPL_ERR_IO, std::string(error.what()) + " (sample index " +
                                          std::to_string(index) + ")");
      }
    });
  }

 private:
  std::unique_ptr<ShardSet> shards_;
  ImageSampleSpec spec_;
  int threads_;
};

// Checks the labels against classes=N (or counts them) and, without size=, that every image has
// the first one's size; returns the number of classes.
int64_t CheckImageSamples(const ShardSet& shards, const WebDatasetOptions& options) {
  const ShardSet::Sample first = shards.Locate(0);
  int64_t largest = 0;
  for (int64_t i = 0; i < shards.count(); ++i) {
    const ShardSet::Sample sample = shards.Locate(i);
    Require(options.classes == 0 || sample.record->label < options.classes,
            ShardSet::Describe(sample) + ": its label (." + options.layout.label_extension + ") " +
                std::to_string(sample.record->label) +
                " is not below classes=" + std::to_string(options.classes));
    largest = std::max(largest, sample.record->label);
    const bool same_size = sample.record->height == first.record->height &&
                           sample.record->width == first.record->width;
    Require(options.height > 0 || same_size,
            ShardSet::Describe(sample) + ": the image is " + std::to_string(sample.record->height) +
                "x" + std::to_string(sample.record->width) + " (height x width) but " +
                ShardSet::Describe(first) + " is " + std::to_string(first.record->height) + "x" +
                std::to_string(first.record->width) +
                "; images of several sizes need size=S (each is cropped and resized to it)");
  }
  return options.classes > 0 ? options.classes : largest + 1;
}

std::unique_ptr<Dataset> OpenImages(const OpenRequest& request, const WebDatasetOptions& options,
                                    std::unique_ptr<ShardSet> shards, int threads) {
  const int64_t classes = CheckImageSamples(*shards, options);
  const dpl::datasets::webdataset::IndexRecord& first = *shards->Locate(0).record;
  ImageSampleSpec spec;
  spec.channels = options.channels > 0 ? options.channels : first.channels;
  spec.height = options.height > 0 ? options.height : first.height;
  spec.width = options.width > 0 ? options.width : first.width;
  spec.crop = options.height == 0 ? ImageCrop::kAsStored
              : request.train()   ? options.train_crop
                                  : ImageCrop::kCenter;
  spec.ranges = options.ranges;
  spec.resize_shorter = options.resize_shorter;
  spec.flip = request.train() && options.flip;
  spec.seed = request.seed;
  const dpl::datasets::SampleTransform transform(
      options.transform, {{0.0f}, {1.0f}}, {spec.channels, spec.height, spec.width},
      dpl::datasets::SourceType::kUInt8, /*augment=*/false, request.seed, "the shards");
  spec.table = transform.uint8_table();
  return std::make_unique<ImageShardDataset>(std::move(shards), std::move(spec), classes, threads);
}

struct WebDatasetTraits {
  static constexpr char kName[] = "webdataset";
  using Options = WebDatasetOptions;

  static Options ReadOptions(const dpl::support::KeyValueOptions& options) {
    return dpl::datasets::webdataset::ReadWebDatasetOptions(options);
  }

  static std::unique_ptr<Dataset> Open(const OpenRequest& request, const Options& options) {
    namespace wds = dpl::datasets::webdataset;
    const int threads = options.threads > 0 ? options.threads : request.num_threads;
    const std::vector<std::string> paths = SplitShards(request, options);
    const bool tokens = options.kind == SampleKind::kTokens;
    const wds::InputInspector inspect =
        tokens ? wds::TokenInspector(options.token_dtype) : wds::InputInspector(InspectImage);
    auto shards = std::make_unique<ShardSet>(paths, options.layout, inspect, request.cache_dir,
                                             request.log, threads);
    Require(shards->count() > 0, "the " + std::to_string(paths.size()) + " shards of the " +
                                     request.split_name() + " split (the first: " + paths.front() +
                                     ") hold no sample of " + options.layout.Text() +
                                     "; check the shards, or input= and label= (a member's "
                                     "extension is all after the first dot of its file name: "
                                     "a.seg.png is key a, extension seg.png)");
    request.log.Info(std::to_string(shards->count()) + " samples in " +
                     std::to_string(paths.size()) + " shards");
    if (tokens) return wds::OpenTokenSamples(options, std::move(shards), threads);
    return OpenImages(request, options, std::move(shards), threads);
  }
};

}  // namespace

DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 webdataset_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
const dpl_dataset_plugin_v2 webdataset_dataset_plugin =
    dpl::datasets::PluginTable<WebDatasetTraits>(
        "1.0.0",
        "WebDataset shards: uncompressed tar files of samples (image + label, or token ids), "
        "read in place and decoded on the fly");
