#include "training/idx_dataset.hpp"

#include <zlib.h>

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <sstream>

namespace dpl::training {
namespace {

bool FileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string Hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

Result<std::string> FindFile(const std::string& directory, const std::string& base_name) {
  const std::string gz = directory + "/" + base_name + ".gz";
  const std::string raw = directory + "/" + base_name;
  if (FileExists(gz)) return gz;
  if (FileExists(raw)) return raw;
  return Status::Error("missing data file: looked for " + gz + " and " + raw +
                       "; pass --data-dir with the folder holding the MNIST-format files");
}

// Whole (decompressed) contents of a gzipped or raw file; gzread passes raw files through.
Result<std::vector<uint8_t>> ReadAll(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) return Status::Error(path + ": cannot open for reading");
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int got = gzread(file.get(), chunk, sizeof chunk);
    if (got < 0) {
      int code = 0;
      return Status::Error(path + ": read failed: " + gzerror(file.get(), &code));
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  return bytes;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

const std::array<float, 256> Dataset::kNormalisedPixel = [] {
  std::array<float, 256> table{};
  const float scale = 1.0f / 255.0f;
  for (int v = 0; v < 256; ++v) table[v] = (float(v) * scale - kNormaliseMean) / kNormaliseStd;
  return table;
}();

std::string ImagesFileName(DatasetSplit split) {
  return split == DatasetSplit::kTrain ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}
std::string LabelsFileName(DatasetSplit split) {
  return split == DatasetSplit::kTrain ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

Result<Dataset> LoadIdxDataset(const std::string& directory, DatasetSplit split) {
  Result<std::string> images_path = FindFile(directory, ImagesFileName(split));
  if (!images_path.ok()) return images_path.status();
  Result<std::string> labels_path = FindFile(directory, LabelsFileName(split));
  if (!labels_path.ok()) return labels_path.status();

  Result<std::vector<uint8_t>> image_bytes = ReadAll(*images_path);
  if (!image_bytes.ok()) return image_bytes.status();
  Result<std::vector<uint8_t>> label_bytes = ReadAll(*labels_path);
  if (!label_bytes.ok()) return label_bytes.status();
  const std::vector<uint8_t>& img = *image_bytes;
  const std::vector<uint8_t>& lbl = *label_bytes;

  if (img.size() < 16) {
    return Status::Error(*images_path + ": truncated: " + std::to_string(img.size()) +
                         " bytes, shorter than the 16-byte IDX image header");
  }
  if (BigEndian32(img.data()) != kIdxImageMagic) {
    return Status::Error(*images_path + ": wrong magic number " + Hex32(BigEndian32(img.data())) +
                         ", expected " + Hex32(kIdxImageMagic) + " (IDX unsigned-byte images)");
  }
  if (lbl.size() < 8) {
    return Status::Error(*labels_path + ": truncated: " + std::to_string(lbl.size()) +
                         " bytes, shorter than the 8-byte IDX label header");
  }
  if (BigEndian32(lbl.data()) != kIdxLabelMagic) {
    return Status::Error(*labels_path + ": wrong magic number " + Hex32(BigEndian32(lbl.data())) +
                         ", expected " + Hex32(kIdxLabelMagic) + " (IDX unsigned-byte labels)");
  }
  Dataset dataset;
  dataset.images_path = *images_path;
  dataset.labels_path = *labels_path;
  dataset.count = BigEndian32(img.data() + 4);
  dataset.rows = BigEndian32(img.data() + 8);
  dataset.columns = BigEndian32(img.data() + 12);
  const int64_t label_count = BigEndian32(lbl.data() + 4);
  const uint64_t pixel_bytes = uint64_t(dataset.count) * dataset.rows * dataset.columns;
  if (img.size() - 16 < pixel_bytes) {
    return Status::Error(*images_path + ": truncated: the header declares " +
                         std::to_string(dataset.count) + " images of " +
                         std::to_string(dataset.rows) + "x" + std::to_string(dataset.columns) +
                         " (" + std::to_string(pixel_bytes) + " bytes) but only " +
                         std::to_string(img.size() - 16) + " bytes of pixels follow");
  }
  if (lbl.size() - 8 < uint64_t(label_count)) {
    return Status::Error(*labels_path + ": truncated: the header declares " +
                         std::to_string(label_count) + " labels but only " +
                         std::to_string(lbl.size() - 8) + " bytes of labels follow");
  }
  if (label_count != dataset.count) {
    return Status::Error("image/label count mismatch: " + *images_path + " holds " +
                         std::to_string(dataset.count) + " images but " + *labels_path + " holds " +
                         std::to_string(label_count) + " labels");
  }
  // Reuse the file's buffer rather than copy it: the peak memory of a worker is the point.
  dataset.pixels = std::move(*image_bytes);
  dataset.pixels.erase(dataset.pixels.begin(), dataset.pixels.begin() + 16);
  dataset.pixels.resize(pixel_bytes);
  dataset.labels.assign(lbl.begin() + 8, lbl.begin() + 8 + label_count);
  return dataset;
}

Status CheckDatasetMatchesModel(const Dataset& dataset, const dpl_model_info_v1& info) {
  std::ostringstream model_shape;
  int64_t model_elements = 1;
  model_shape << "(";
  for (uint32_t d = 0; d < info.input_ndim && d < DPL_MODEL_MAX_INPUT_DIMS; ++d) {
    model_shape << (d ? ", " : "") << info.input_shape[d];
    model_elements *= info.input_shape[d];
  }
  model_shape << ")";
  const bool spatial_matches = info.input_ndim >= 2 &&
                               info.input_shape[info.input_ndim - 2] == dataset.rows &&
                               info.input_shape[info.input_ndim - 1] == dataset.columns;
  if (!spatial_matches || model_elements != dataset.SampleElements() || info.input_ndim > 3) {
    return Status::Error("wrong shape: the model expects samples of shape " + model_shape.str() +
                         " but " + dataset.images_path + " holds images of " +
                         std::to_string(dataset.rows) + "x" + std::to_string(dataset.columns) +
                         "; use a data set that matches the model or another --model");
  }
  for (int64_t i = 0; i < dataset.count; ++i) {
    if (dataset.labels[i] >= info.num_classes) {
      return Status::Error(dataset.labels_path + ": label " + std::to_string(dataset.labels[i]) +
                           " of sample " + std::to_string(i) + " is not below the model's " +
                           std::to_string(info.num_classes) + " classes");
    }
  }
  return Status::Ok();
}

}  // namespace dpl::training
