// MNIST-format (IDX) data sets loaded once into memory: images as their raw bytes, normalised to
// float32 (the recipe's ToTensor() then Normalize(0.1302, 0.3069)) only when a batch is gathered,
// labels as int64. Files may be gzipped or raw. Keeping bytes, not floats, is 4x less memory per
// worker (47 MB instead of 188 MB for MNIST's training set) at no cost: a batch is copied anyway.
#pragma once

#include <array>
#include <cstdint>
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

struct Dataset {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t columns = 0;
  std::vector<uint8_t> pixels;  // count * rows * columns raw bytes
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
Result<Dataset> LoadIdxDataset(const std::string& directory, DatasetSplit split);

// Checks that one image matches the model's declared input (described by `info`): the input must
// be (rows, columns) or (1, rows, columns). Labels must be below info.num_classes.
Status CheckDatasetMatchesModel(const Dataset& dataset, const dpl_model_info_v1& info);

}  // namespace dpl::training
