#include "common/plugin.hpp"

#include "dpl/support/tensor.hpp"

// The ABI's opaque instance: the plugin's Dataset.
struct dpl_dataset {
  std::unique_ptr<dpl::datasets::Dataset> impl;
};

namespace dpl::datasets {

using support::PluginError;
using support::Require;

int64_t SampleTensor::elements() const {
  int64_t elements = 1;
  for (const int64_t extent : shape) elements *= extent;
  return elements;
}

size_t SampleTensor::bytes() const {
  return size_t(elements()) * support::ElementSize(dtype);
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

// Checks that `tensor` is a batch of `sample`: its dtype, host memory, compact, and shape
// (n, sample.shape...) for some n.
void CheckBatchTensor(const DLTensor& tensor, const std::string& what, const SampleTensor& sample) {
  const std::string dtype = support::DtypeName(sample.dtype);
  Require(tensor.dtype.code == sample.dtype.code && tensor.dtype.bits == sample.dtype.bits &&
              tensor.dtype.lanes == sample.dtype.lanes,
          what + " has dtype " + support::DtypeName(tensor.dtype) + "; fill writes " + dtype);
  Require(support::InHostMemory(tensor.device),
          what + " is on device type " + std::to_string(tensor.device.device_type) +
              "; fill writes host memory (kDLCPU or kDLCUDAHost)");
  support::CheckContiguous(tensor, what);
  bool fits = tensor.ndim == int32_t(sample.shape.size()) + 1;
  for (size_t d = 0; fits && d < sample.shape.size(); ++d) {
    fits = tensor.shape[d + 1] == sample.shape[d];
  }
  std::string expected = "(n";
  for (const int64_t extent : sample.shape) expected += ", " + std::to_string(extent);
  Require(fits, what + " has shape " + ShapeOf(tensor) + " but a batch of this dataset has shape " +
                    expected + ")");
}

}  // namespace

std::string Prefix(const char* name) {
  return std::string("dataset \"") + name + "\"";
}

OpenRequest ReadConfig(const dpl_dataset_config_v2* config, const char* name) {
  Require(config != nullptr, "config is NULL");
  Require(config->struct_size >= sizeof(dpl_dataset_config_v2),
          "config struct_size " + std::to_string(config->struct_size) +
              " is smaller than dpl_dataset_config_v2 (" +
              std::to_string(sizeof(dpl_dataset_config_v2)) + ")");
  Require(config->version == DPL_DATASET_ABI_VERSION_2,
          "config version " + std::to_string(config->version) + " is not dataset ABI version " +
              std::to_string(DPL_DATASET_ABI_VERSION_2));
  Require(config->path != nullptr && config->path[0] != '\0',
          "no data path; pass --data-dir with the folder holding the data");
  Require(config->split == DPL_DATASET_SPLIT_TRAIN || config->split == DPL_DATASET_SPLIT_TEST ||
              config->split == DPL_DATASET_SPLIT_VALIDATION,
          "config split " + std::to_string(config->split) +
              " is not train (0), test (1) or validation (2)");
  Require(config->num_threads >= 1,
          "config num_threads must be at least 1, got " + std::to_string(config->num_threads));
  OpenRequest request;
  request.path = config->path;
  while (request.path.size() > 1 && request.path.back() == '/') request.path.pop_back();
  request.cache_dir = config->cache_dir != nullptr ? config->cache_dir : "";
  request.split = config->split;
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

void Describe(const SampleTensor& from, dpl_sample_tensor_v2* to) {
  to->dtype = from.dtype;
  to->ndim = uint32_t(from.shape.size());
  for (size_t d = 0; d < DPL_DATASET_MAX_SAMPLE_DIMS; ++d) {
    to->shape[d] = d < from.shape.size() ? from.shape[d] : 0;
  }
}

dpl_status Describe(const char* name, dpl_dataset* dataset, dpl_dataset_info_v2* info) {
  return support::Guarded(Prefix(name), [&] {
    Require(dataset != nullptr, "dataset is NULL");
    Require(info != nullptr, "info is NULL");
    Require(info->struct_size >= sizeof(dpl_dataset_info_v2),
            "info struct_size " + std::to_string(info->struct_size) +
                " is smaller than dpl_dataset_info_v2 (" +
                std::to_string(sizeof(dpl_dataset_info_v2)) + ")");
    const Dataset& impl = *dataset->impl;
    info->reserved = 0;
    Describe(impl.input(), &info->input);
    Describe(impl.target(), &info->target);
    info->count = impl.count();
    info->num_classes = impl.num_classes();
  });
}

dpl_status Fill(const char* name, dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                DLTensor* input, DLTensor* target) {
  return support::Guarded(Prefix(name), [&] {
    Require(dataset != nullptr, "dataset is NULL");
    Require(input != nullptr && target != nullptr, "input or target is NULL");
    Dataset& impl = *dataset->impl;
    CheckBatchTensor(*input, "input", impl.input());
    CheckBatchTensor(*target, "target", impl.target());
    const int64_t n = input->shape[0];
    Require(target->shape[0] == n, "target has shape " + ShapeOf(*target) + " but input holds " +
                                       std::to_string(n) + " samples");
    Require(n == 0 || indices != nullptr, "indices is NULL");
    for (int64_t i = 0; i < n; ++i) {
      Require(indices[i] >= 0 && indices[i] < impl.count(),
              "index " + std::to_string(indices[i]) + " at position " + std::to_string(i) +
                  " is outside the " + std::to_string(impl.count()) + " samples of the data");
    }
    if (n == 0) return;
    impl.Fill(indices, n, epoch, support::DataPointer(*input), support::DataPointer(*target));
  });
}

}  // namespace detail
}  // namespace dpl::datasets
