#include "training/model_setup.hpp"

#include <algorithm>

#include "common/log.hpp"
#include "training/precision.hpp"

namespace dpl::training {
namespace {

bool SameSample(const dpl_sample_tensor& a, const dpl_sample_tensor& b) {
  return a.dtype.code == b.dtype.code && a.dtype.bits == b.dtype.bits &&
         a.dtype.lanes == b.dtype.lanes && a.ndim == b.ndim &&
         std::equal(a.shape, a.shape + std::min<uint32_t>(a.ndim, DPL_DATASET_MAX_SAMPLE_DIMS),
                    b.shape);
}

// A model of typed samples (ModelCapability::kTypedSamples) takes exactly the data's input and
// target, and at least the data's classes (for token data: every id of the data is in the
// model's vocabulary).
Status CheckTypedModelTakesData(const DataSplit& data, const Model& model) {
  const dpl_model_info& info = model.info();
  const dpl_sample_tensor& input = data.input();
  const dpl_sample_tensor& target = data.target();
  if (SameSample(info.input, input) && SameSample(info.target, target) &&
      info.num_classes >= data.num_classes()) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      "wrong samples: the model '" + model.name() + "' takes " + TensorText(info.input) +
      " samples with " + TensorText(info.target) + " targets in " +
      std::to_string(info.num_classes) + " classes, but " + data.Describe() + " has " +
      TensorText(input) + " samples with " + TensorText(target) + " targets in " +
      std::to_string(data.num_classes()) +
      " classes; use data that fits the model or another --model");
}

}  // namespace

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
  // The data's samples and classes, for a model that adapts to them (ModelCapability::kDataShape,
  // kTypedSamples); input_shape repeats input's shape for the v3 prefix.
  model_config.input = data.train->input();
  model_config.target = data.train->target();
  model_config.input_ndim = std::min<uint32_t>(model_config.input.ndim, DPL_MODEL_MAX_INPUT_DIMS);
  std::copy(model_config.input.shape, model_config.input.shape + model_config.input_ndim,
            model_config.input_shape);
  model_config.num_classes = data.train->num_classes();
  DPL_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Create(plugin, model_config));
  // What the model describes must fit every split of the data, whether it was told or not.
  const dpl_model_info& info = model->info();
  for (const DataSplit* split : {data.train.get(), data.test.get(), data.validation.get()}) {
    if (split == nullptr) continue;
    DPL_RETURN_IF_ERROR(model->Has(ModelCapability::kTypedSamples)
                            ? CheckTypedModelTakesData(*split, *model)
                            : CheckDataFitsModel(*split, model->name(), info.input_ndim,
                                                 info.input_shape, info.num_classes));
  }
  return model;
}

}  // namespace dpl::training
