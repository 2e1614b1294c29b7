#include "training/model_setup.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "training/precision.hpp"

namespace dpl::training {

Result<std::unique_ptr<Model>> CreateModelForData(const ModelPlugin& plugin,
                                                  const TrainingConfig& config,
                                                  const WorkerIdentity& identity,
                                                  const TrainingData& data) {
  dpl_model_config model_config{};
  model_config.struct_size = sizeof model_config;
  model_config.options = config.model_options.c_str();
  model_config.device_type = identity.device_type;
  model_config.device_id = identity.device_id;
  model_config.seed = config.seed;
  model_config.num_threads = std::max(1, identity.threads);
  model_config.rank = identity.rank;
  model_config.log = log::PluginLogCallback;
  model_config.log_context = nullptr;
  model_config.precision = DplPrecision(config.precision);
  // The data's shape and classes, for a model that adapts to them (ModelCapability::kDataShape).
  const std::vector<int64_t>& shape = data.train->sample_shape();
  model_config.input_ndim = uint32_t(std::min<size_t>(shape.size(), DPL_MODEL_MAX_INPUT_DIMS));
  std::copy(shape.begin(), shape.begin() + model_config.input_ndim, model_config.input_shape);
  model_config.num_classes = data.train->num_classes();
  Result<std::unique_ptr<Model>> model = Model::Create(plugin, model_config);
  if (!model.ok()) return model.status();
  // A plugin without kDataShape is not told the shape: what it describes must fit the data.
  const dpl_model_info& info = (*model)->info();
  for (const DataSplit* split : {data.train.get(), data.test.get(), data.validation.get()}) {
    if (split == nullptr) continue;
    DPL_RETURN_IF_ERROR(CheckDataFitsModel(*split, (*model)->name(), info.input_ndim,
                                           info.input_shape, info.num_classes));
  }
  return model;
}

}  // namespace dpl::training
