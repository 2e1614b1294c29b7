#include "training/data.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "dpl/support/tensor.hpp"
#include "training/number_text.hpp"

namespace dpl::training {
namespace {

// The shape without leading extents of 1.
std::vector<int64_t> Squeezed(std::vector<int64_t> shape) {
  while (shape.size() > 1 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

bool IsInteger(const DLDataType& dtype) {
  return dtype.code == kDLInt || dtype.code == kDLUInt;
}

// What is wrong with one tensor a plugin describes ("" when nothing): an element type the host
// does not know, too many axes, an extent below 1.
std::string TensorProblem(const dpl_sample_tensor& tensor) {
  if (support::ElementTypeOf(tensor.dtype) == support::ElementType::kUnknown) {
    return "has dtype " + support::DtypeName(tensor.dtype) +
           " (the host takes float16, bfloat16, float32, float64, int8, uint8, int32 and int64)";
  }
  if (tensor.ndim > DPL_DATASET_MAX_SAMPLE_DIMS) {
    return "has " + std::to_string(tensor.ndim) + " axes, more than " +
           std::to_string(DPL_DATASET_MAX_SAMPLE_DIMS);
  }
  for (uint32_t d = 0; d < tensor.ndim; ++d) {
    if (tensor.shape[d] < 1) return "has shape " + TensorText(tensor) + ", an extent below 1";
  }
  return "";
}

}  // namespace

std::vector<int64_t> ShapeOf(const dpl_sample_tensor& tensor) {
  const uint32_t ndim = std::min<uint32_t>(tensor.ndim, DPL_DATASET_MAX_SAMPLE_DIMS);
  return std::vector<int64_t>(tensor.shape, tensor.shape + ndim);
}

int64_t ElementsOf(const dpl_sample_tensor& tensor) {
  int64_t elements = 1;
  for (int64_t extent : ShapeOf(tensor)) elements *= extent;
  return elements;
}

std::string TensorText(const dpl_sample_tensor& tensor) {
  return support::DtypeName(tensor.dtype) + " " + ShapeText(ShapeOf(tensor));
}

Result<std::unique_ptr<DataSplit>> DataSplit::Open(const DatasetPlugin& plugin,
                                                   const TrainingConfig& config, int32_t split,
                                                   int threads) {
  std::unique_ptr<DataSplit> data(new DataSplit(plugin, config.data_dir, split));
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
  DPL_RETURN_IF_ERROR(data->CheckInfo());
  data->sample_shape_ = ShapeOf(data->info_.input);
  return data;
}

DataSplit::~DataSplit() {
  if (instance_ != nullptr) plugin_.table->destroy(instance_);
}

Status DataSplit::Call(const char* function, dpl_status status) const {
  if (status == DPL_OK) return Status::Ok();
  return PluginCallFailure(plugin_.label, function, status, plugin_.table->last_error());
}

Status DataSplit::CheckInfo() const {
  std::string problem;
  if (std::string input = TensorProblem(info_.input); !input.empty()) {
    problem = "a sample's input " + input;
  } else if (std::string target = TensorProblem(info_.target); !target.empty()) {
    problem = "a sample's target " + target;
  } else if (info_.count < 1) {
    problem = std::to_string(info_.count) + " samples";
  } else if (info_.num_classes < 0 || (IsInteger(info_.target.dtype) && info_.num_classes < 1)) {
    problem = std::to_string(info_.num_classes) + " classes for " +
              support::DtypeName(info_.target.dtype) + " targets";
  }
  if (problem.empty()) return Status::Ok();
  return Status::Error(DPL_ERR_INTERNAL, "the dataset plugin '" + plugin_.label.name + "' (" +
                                             plugin_.label.path + ") describes " + problem +
                                             " for " + Describe() + "; fix the plugin");
}

bool DataSplit::IsClassification() const {
  const DLDataType input = info_.input.dtype, target = info_.target.dtype;
  return input.code == kDLFloat && input.bits == 32 && target.code == kDLInt && target.bits == 64 &&
         info_.target.ndim == 0;
}

std::string DataSplit::Describe() const {
  const std::string data = "the " + plugin_.label.name + " data at " + path_;
  if (split_ == DPL_DATASET_SPLIT_VALIDATION) return data + " (its validation split)";
  if (split_ == DPL_DATASET_SPLIT_TEST) return data + " (its test split)";
  return data;
}

Status DataSplit::Fill(const int64_t* indices, int64_t epoch, const DLTensor& input,
                       const DLTensor& target) {
  DLTensor input_copy = input, target_copy = target;
  return Call("fill", plugin_.table->fill(instance_, indices, epoch, &input_copy, &target_copy));
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
    auto validation = DataSplit::Open(plugin, config, DPL_DATASET_SPLIT_VALIDATION, threads);
    if (!validation.ok()) return validation.status().WithContext("opening the validation set");
    data.validation = std::move(*validation);
  }
  return data;
}

Status CheckDataFitsModel(const DataSplit& data, const std::string& model_name, uint32_t model_ndim,
                          const int64_t* model_shape, int64_t model_classes) {
  if (!data.IsClassification()) {
    return Status::InvalidArgument("wrong sample type: the model '" + model_name +
                                   "' takes float32 samples with one int64 label each, but " +
                                   data.Describe() + " has samples of " + TensorText(data.input()) +
                                   " with targets of " + TensorText(data.target()) +
                                   "; use data that fits the model or another --model");
  }
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
