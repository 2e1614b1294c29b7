#include "training/data.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "dpl/dataset_v2.h"

namespace dpl::training {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

// The shape without leading extents of 1.
std::vector<int64_t> Squeezed(std::vector<int64_t> shape) {
  while (shape.size() > 1 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

}  // namespace

Result<std::unique_ptr<DataSplit>> DataSplit::Open(const DatasetPlugin& plugin,
                                                   const TrainingConfig& config,
                                                   dpl_dataset_split split, int threads) {
  std::unique_ptr<DataSplit> data(new DataSplit(plugin, config.data_dir));
  dpl_dataset_config dataset_config{};
  dataset_config.struct_size = sizeof dataset_config;
  dataset_config.path = config.data_dir.c_str();
  dataset_config.options = config.data_options.c_str();
  dataset_config.split = split;
  dataset_config.num_threads = std::max(1, threads);
  dataset_config.cache_dir = config.data_cache_dir.c_str();
  dataset_config.seed = config.seed;
  dataset_config.log = log::PluginLogCallback;
  dataset_config.log_context = nullptr;
  DPL_RETURN_IF_ERROR(
      data->Call("create", plugin.table->create(&dataset_config, &data->instance_)));
  data->info_.struct_size = sizeof data->info_;
  DPL_RETURN_IF_ERROR(
      data->Call("describe", plugin.table->describe(data->instance_, &data->info_)));
  const uint32_t ndim = std::min<uint32_t>(data->info_.sample_ndim, DPL_DATASET_MAX_SAMPLE_DIMS);
  data->sample_shape_.assign(data->info_.sample_shape, data->info_.sample_shape + ndim);
  return data;
}

DataSplit::~DataSplit() {
  if (instance_ != nullptr) plugin_.table->destroy(instance_);
}

Status DataSplit::Call(const char* function, dpl_status status) const {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure(plugin_.label, function, status, plugin_.table->last_error());
}

int64_t DataSplit::SampleElements() const {
  int64_t elements = 1;
  for (int64_t extent : sample_shape_) elements *= extent;
  return elements;
}

std::string DataSplit::Describe() const {
  return "the " + plugin_.label.name + " data at " + path_;
}

Status DataSplit::Fill(const int64_t* indices, int64_t epoch, const DLTensor& input,
                       const DLTensor& labels) {
  DLTensor input_copy = input, labels_copy = labels;
  return Call("fill", plugin_.table->fill(instance_, indices, epoch, &input_copy, &labels_copy));
}

Result<TrainingData> OpenTrainingData(const DatasetPlugin& plugin, const TrainingConfig& config,
                                      int threads) {
  TrainingData data;
  auto train = DataSplit::Open(plugin, config, DPL_DATASET_SPLIT_TRAIN, threads);
  if (!train.ok()) return train.status().WithContext("opening the training set");
  data.train = std::move(*train);
  if (config.evaluate) {
    auto test = DataSplit::Open(plugin, config, DPL_DATASET_SPLIT_TEST, threads);
    if (!test.ok()) return test.status().WithContext("opening the test set");
    data.test = std::move(*test);
  }
  if (config.eval_every > 0) {
    auto validation =
        DataSplit::Open(plugin, config, dpl_dataset_split(DPL_DATASET_SPLIT_VALIDATION), threads);
    if (!validation.ok()) return validation.status().WithContext("opening the validation set");
    data.validation = std::move(*validation);
  }
  return data;
}

Status CheckDataFitsModel(const DataSplit& data, const std::string& model_name, uint32_t model_ndim,
                          const int64_t* model_shape, int64_t model_classes) {
  const std::vector<int64_t> model(model_shape, model_shape + model_ndim);
  if (Squeezed(model) != Squeezed(data.sample_shape()) || data.num_classes() > model_classes) {
    return Status::InvalidArgument(
        "wrong shape: the model '" + model_name + "' takes samples of shape " + ShapeText(model) +
        " in " + std::to_string(model_classes) + " classes, but " + data.Describe() +
        " has samples of shape " + ShapeText(data.sample_shape()) + " in " +
        std::to_string(data.num_classes()) +
        " classes; use data that fits the model or another --model");
  }
  return Status::Ok();
}

}  // namespace dpl::training
