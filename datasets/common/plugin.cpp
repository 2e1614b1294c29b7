#include "common/plugin.hpp"

#include "dpl/support/tensor.hpp"

// The ABI's opaque instance: the plugin's Dataset.
struct dpl_dataset {
  std::unique_ptr<dpl::datasets::Dataset> impl;
};

namespace dpl::datasets {

using support::PluginError;
using support::Require;

int64_t Dataset::SampleElements() const {
  int64_t elements = 1;
  for (const int64_t extent : sample_shape_) elements *= extent;
  return elements;
}

namespace detail {
namespace {

std::string ShapeOf(const DLTensor& tensor) {
  std::string text = "(";
  for (int32_t d = 0; d < tensor.ndim; ++d) {
    text += (d ? ", " : "") + std::to_string(tensor.shape[d]);
  }
  return text + ")";
}

void CheckHostTensor(const DLTensor& tensor, const std::string& what, DLDataTypeCode code,
                     uint8_t bits, const char* dtype_name) {
  Require(tensor.dtype.code == code && tensor.dtype.bits == bits && tensor.dtype.lanes == 1,
          what + " has dtype " + support::DtypeName(tensor.dtype) + "; fill writes " + dtype_name);
  Require(support::InHostMemory(tensor.device),
          what + " is on device type " + std::to_string(tensor.device.device_type) +
              "; fill writes host memory (kDLCPU or kDLCUDAHost)");
  support::CheckContiguous(tensor, what);
}

}  // namespace

std::string Prefix(const char* name) {
  return std::string("dataset \"") + name + "\"";
}

OpenRequest ReadConfig(const dpl_dataset_config_v1* config, const char* name) {
  Require(config != nullptr, "config is NULL");
  Require(config->struct_size >= sizeof(dpl_dataset_config_v1),
          "config struct_size " + std::to_string(config->struct_size) +
              " is smaller than dpl_dataset_config_v1 (" +
              std::to_string(sizeof(dpl_dataset_config_v1)) + ")");
  Require(config->version == DPL_DATASET_ABI_VERSION_1,
          "config version " + std::to_string(config->version) + " is not dataset ABI version " +
              std::to_string(DPL_DATASET_ABI_VERSION_1));
  Require(config->path != nullptr && config->path[0] != '\0',
          "no data path; pass --data-dir with the folder holding the data");
  Require(config->split == DPL_DATASET_SPLIT_TRAIN || config->split == DPL_DATASET_SPLIT_TEST,
          "config split " + std::to_string(config->split) + " is neither train (0) nor test (1)");
  Require(config->num_threads >= 1,
          "config num_threads must be at least 1, got " + std::to_string(config->num_threads));
  OpenRequest request;
  request.path = config->path;
  while (request.path.size() > 1 && request.path.back() == '/') request.path.pop_back();
  request.cache_dir = config->cache_dir != nullptr ? config->cache_dir : "";
  request.split = dpl_dataset_split(config->split);
  request.num_threads = config->num_threads;
  request.seed = config->seed;
  request.log = Logger(config->log, config->log_context, Prefix(name));
  return request;
}

dpl_dataset* Wrap(std::unique_ptr<Dataset> dataset) {
  return new dpl_dataset{std::move(dataset)};
}

void Destroy(dpl_dataset* dataset) {
  delete dataset;
}

dpl_status Describe(const char* name, dpl_dataset* dataset, dpl_dataset_info_v1* info) {
  return support::Guarded(Prefix(name), [&] {
    Require(dataset != nullptr, "dataset is NULL");
    Require(info != nullptr, "info is NULL");
    Require(info->struct_size >= sizeof(dpl_dataset_info_v1),
            "info struct_size " + std::to_string(info->struct_size) +
                " is smaller than dpl_dataset_info_v1 (" +
                std::to_string(sizeof(dpl_dataset_info_v1)) + ")");
    const Dataset& impl = *dataset->impl;
    info->sample_ndim = uint32_t(impl.sample_shape().size());
    for (size_t d = 0; d < DPL_DATASET_MAX_SAMPLE_DIMS; ++d) {
      info->sample_shape[d] = d < impl.sample_shape().size() ? impl.sample_shape()[d] : 0;
    }
    info->count = impl.count();
    info->num_classes = impl.num_classes();
  });
}

dpl_status Fill(const char* name, dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                DLTensor* input, DLTensor* labels) {
  return support::Guarded(Prefix(name), [&] {
    Require(dataset != nullptr, "dataset is NULL");
    Require(input != nullptr && labels != nullptr, "input or labels is NULL");
    Dataset& impl = *dataset->impl;
    CheckHostTensor(*input, "input", kDLFloat, 32, "float32");
    CheckHostTensor(*labels, "labels", kDLInt, 64, "int64");
    const std::vector<int64_t>& shape = impl.sample_shape();
    bool input_fits = input->ndim == int32_t(shape.size()) + 1;
    for (size_t d = 0; input_fits && d < shape.size(); ++d) {
      input_fits = input->shape[d + 1] == shape[d];
    }
    std::string expected = "(n";
    for (const int64_t extent : shape) expected += ", " + std::to_string(extent);
    Require(input_fits, "input has shape " + ShapeOf(*input) +
                            " but a batch of this dataset has shape " + expected + ")");
    const int64_t n = input->shape[0];
    Require(labels->ndim == 1 && labels->shape[0] == n, "labels has shape " + ShapeOf(*labels) +
                                                            " but input holds " +
                                                            std::to_string(n) + " samples");
    Require(n == 0 || indices != nullptr, "indices is NULL");
    for (int64_t i = 0; i < n; ++i) {
      Require(indices[i] >= 0 && indices[i] < impl.count(),
              "index " + std::to_string(indices[i]) + " at position " + std::to_string(i) +
                  " is outside the " + std::to_string(impl.count()) + " samples of the data");
    }
    if (n == 0) return;
    impl.Fill(indices, n, epoch, static_cast<float*>(support::DataPointer(*input)),
              static_cast<int64_t*>(support::DataPointer(*labels)));
  });
}

}  // namespace detail
}  // namespace dpl::datasets
