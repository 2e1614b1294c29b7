// MNIST-format (IDX) data sets loaded once into memory: images as their raw bytes, normalised to
// float32 (the recipe's ToTensor() then Normalize(0.1302, 0.3069)) only when a batch is gathered,
// labels as int64. Files may be gzipped or raw. Keeping bytes, not floats, is 4x less memory per
// worker (47 MB instead of 188 MB for MNIST's training set) at no cost: a batch is copied anyway.
//
// Note [Data cache]: inflating Fashion-MNIST's 26 MB of gzip takes each worker about 0.4 s of CPU
// at every start. With a cache folder, the first run also writes the inflated IDX file there
// (atomically, write then rename), keyed by the source's path, size and modification time; later
// runs read that raw file instead, a plain copy from the page cache. A raw (not gzipped) source
// is read the same way. A cache entry is checked like any IDX file; one that is unreadable or
// wrong is ignored and written again.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "dpl/model.h"

namespace dpl::training {

inline constexpr float kNormaliseMean = 0.1302f;
inline constexpr float kNormaliseStd = 0.3069f;
inline constexpr uint32_t kIdxImageMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr uint32_t kIdxLabelMagic = 0x00000801;  // unsigned byte, 1 dimension

enum class DatasetSplit { kTrain, kTest };

// Read-only bytes with a shared owner; copies share them.
class SharedBytes {
 public:
  SharedBytes() = default;
  SharedBytes(std::shared_ptr<const void> owner, const uint8_t* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct Dataset {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t columns = 0;
  SharedBytes pixels;           // count * rows * columns raw bytes
  std::vector<int64_t> labels;  // count
  std::string images_path;      // the files actually read, for messages
  std::string labels_path;

  int64_t SampleElements() const { return rows * columns; }
  // Writes sample `index`, normalised, to out[0 .. SampleElements()).
  void NormalisedSample(int64_t index, float* out) const {
    const uint8_t* in = pixels.data() + index * SampleElements();
    for (int64_t i = 0; i < SampleElements(); ++i) out[i] = kNormalisedPixel[in[i]];
  }

  // Every byte value's normalised float, computed once with the recipe's arithmetic.
  static const std::array<float, 256> kNormalisedPixel;
};

// The base file names of a split, e.g. "train-images-idx3-ubyte"; ".gz" is tried first.
std::string ImagesFileName(DatasetSplit split);
std::string LabelsFileName(DatasetSplit split);

// Reads both files of `split` from `directory`. Errors name the file and what is wrong with it
// (missing: both names looked for; wrong magic; truncated; image/label count mismatch).
// `cache_directory` (Note [Data cache]; "" = none) holds inflated copies of gzipped files.
Result<Dataset> LoadIdxDataset(const std::string& directory, DatasetSplit split,
                               const std::string& cache_directory = "");

// Checks that one image matches the model's declared input (described by `info`): the input must
// be (rows, columns) or (1, rows, columns). Labels must be below info.num_classes.
Status CheckDatasetMatchesModel(const Dataset& dataset, const dpl_model_info_v3& info);

}  // namespace dpl::training
