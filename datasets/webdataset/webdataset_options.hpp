// The webdataset plugin's --data-options (README.md lists them with their defaults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/sample_transform.hpp"
#include "crop_geometry.hpp"
#include "dpl/support/options.hpp"
#include "image_sample.hpp"
#include "shard_index.hpp"

namespace dpl::datasets::webdataset {

enum class SampleKind { kImage, kTokens };

struct WebDatasetOptions {
  std::string train_shards;       // shards=: "" = the train/ folder
  std::string validation_shards;  // val_shards=: "" = the val/ (or test/) folder
  SampleKind kind = SampleKind::kImage;
  SampleLayout layout;
  int64_t classes = 0;  // classes=N; 0: the largest label + 1
  int threads = 0;      // threads=N; 0: the config's num_threads

  // Image samples.
  TransformOptions transform;  // mean, std
  int64_t channels = 0;        // 0: the first image's
  int64_t height = 0;          // size=; 0: as stored
  int64_t width = 0;
  ImageCrop train_crop = ImageCrop::kRandomResized;  // with a size
  CropRanges ranges;
  int64_t resize_shorter = 0;  // resize=; 0: size's larger side * 8 / 7 (256 for 224)
  bool flip = false;

  // Token samples.
  int64_t block = 0;                   // block=T: input T ids, target the next T
  int64_t vocab = 0;                   // vocab=V; 0: the largest id + 1
  std::string token_dtype = "uint16";  // dtype= of .bin members
};

// Reads every option (unknown ones are refused by the caller), checking each value.
WebDatasetOptions ReadWebDatasetOptions(const support::KeyValueOptions& options);

}  // namespace dpl::datasets::webdataset
