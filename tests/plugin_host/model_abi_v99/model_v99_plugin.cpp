// A model plugin of the tests' model ABI v99 (model_v99.h), named "v99": softmax regression
// (Linear(features, classes), mean cross-entropy) in float32 on the CPU, for samples of the shape
// and the classes the config gives. Its random state counts the training steps. Besides its
// entry symbol it exports dpl_model_v99_counts(), what it was asked to do, for the test.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"
#include "model_abi_v99/model_v99.h"

namespace {

using dpl::support::PluginError;

constexpr const char* kPluginName = "model \"v99\"";

// What the host asked of every instance of the process.
struct Counts {
  int64_t train_steps = 0;
  int64_t eval_samples = 0;
};
Counts counts;

struct V99Model {
  int64_t features = 0, classes = 0;
  int64_t sample_ndim = 0;
  int64_t sample_shape[DPL_MODEL_MAX_INPUT_DIMS] = {};
  std::vector<float> values, gradients;  // the weight (classes, features), then the bias
  int64_t weight_shape[2] = {0, 0};
  int64_t bias_shape[1] = {0};
  uint64_t steps = 0;  // the "random state"
  dpl_gradient_ready_fn callback = nullptr;
  void* callback_context = nullptr;

  // softmax(W x + b) of sample `x` into p (classes entries).
  void Probabilities(const float* x, std::vector<double>* p) const {
    double largest = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) {
      double z = values[size_t(classes * features + c)];
      for (int64_t i = 0; i < features; ++i) z += double(values[size_t(c * features + i)]) * x[i];
      (*p)[size_t(c)] = z;
      largest = std::max(largest, z);
    }
    double total = 0.0;
    for (double& value : *p) total += value = std::exp(value - largest);
    for (double& value : *p) value /= total;
  }
};

V99Model* As(dpl_model* model) {
  if (model == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "model handle is NULL");
  return reinterpret_cast<V99Model*>(model);
}

DLTensor HostFloats(float* data, int32_t ndim, int64_t* shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = {kDLCPU, 0};
  tensor.ndim = ndim;
  tensor.dtype = {kDLFloat, 32, 1};
  tensor.shape = shape;
  return tensor;
}

dpl_status Create(const dpl_model_config_v99* config, dpl_model** out) {
  return dpl::support::Guarded(kPluginName, [&] {
    dpl::support::Require(config != nullptr && config->struct_size == sizeof *config &&
                              config->version == DPL_MODEL_ABI_VERSION_99,
                          "needs a model ABI v99 config");
    dpl::support::Require(config->sample_ndim >= 1 && config->num_classes >= 2,
                          "needs the data's sample shape and classes");
    dpl::support::KeyValueOptions(config->options, "--model-options").CheckAllKnown();
    auto model = std::make_unique<V99Model>();
    model->sample_ndim = std::min<int64_t>(config->sample_ndim, DPL_MODEL_MAX_INPUT_DIMS);
    model->features = 1;
    for (int64_t d = 0; d < model->sample_ndim; ++d) {
      model->sample_shape[d] = config->sample_shape[d];
      model->features *= config->sample_shape[d];
    }
    model->classes = config->num_classes;
    const size_t size = size_t(model->classes * (model->features + 1));
    model->values.assign(size, 0.0f);
    model->gradients.assign(size, 0.0f);
    model->weight_shape[0] = model->bias_shape[0] = model->classes;
    model->weight_shape[1] = model->features;
    uint64_t state = config->seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < model->classes * model->features; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      model->values[size_t(i)] = (float(state >> 40) / float(1 << 24) - 0.5f) * 0.02f;
    }
    *out = reinterpret_cast<dpl_model*>(model.release());
  });
}

void Destroy(dpl_model* model) {
  delete reinterpret_cast<V99Model*>(model);
}

dpl_status Describe(dpl_model* model, dpl_model_info_v99* info) {
  return dpl::support::Guarded(kPluginName, [&] {
    const V99Model& m = *As(model);
    info->parameter_count = 2;
    info->num_classes = m.classes;
    info->sample_ndim = uint32_t(m.sample_ndim);
    std::copy(m.sample_shape, m.sample_shape + DPL_MODEL_MAX_INPUT_DIMS, info->sample_shape);
  });
}

dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter) {
  return dpl::support::Guarded(kPluginName, [&] {
    V99Model& m = *As(model);
    dpl::support::Require(index < 2, "no parameter " + std::to_string(index));
    const size_t offset = index == 0 ? 0 : size_t(m.classes * m.features);
    parameter->name = index == 0 ? "fc.weight" : "fc.bias";
    int64_t* shape = index == 0 ? m.weight_shape : m.bias_shape;
    parameter->value = HostFloats(m.values.data() + offset, index == 0 ? 2 : 1, shape);
    parameter->gradient = HostFloats(m.gradients.data() + offset, index == 0 ? 2 : 1, shape);
  });
}

dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                    void* context) {
  return dpl::support::Guarded(kPluginName, [&] {
    As(model)->callback = callback;
    As(model)->callback_context = context;
  });
}

dpl_status ZeroGradients(dpl_model* model) {
  return dpl::support::Guarded(kPluginName, [&] {
    std::fill(As(model)->gradients.begin(), As(model)->gradients.end(), 0.0f);
  });
}

// Adds the gradient of the mean loss of sample `x` (of `batch`) with probabilities p.
void Backward(V99Model& m, const float* x, int64_t label, const std::vector<double>& p,
              int64_t batch) {
  for (int64_t c = 0; c < m.classes; ++c) {
    const double d = (p[size_t(c)] - (c == label ? 1.0 : 0.0)) / double(batch);
    m.gradients[size_t(m.classes * m.features + c)] += float(d);
    for (int64_t i = 0; i < m.features; ++i)
      m.gradients[size_t(c * m.features + i)] += float(d * x[i]);
  }
}

dpl_status Step(dpl_model* model, dpl_model_mode mode, const DLTensor* input,
                const DLTensor* labels, float* losses, int64_t* correct) {
  return dpl::support::Guarded(kPluginName, [&] {
    V99Model& m = *As(model);
    const int64_t batch = labels->shape[0];
    const float* images = static_cast<const float*>(input->data);
    const int64_t* targets = static_cast<const int64_t*>(labels->data);
    std::vector<double> p(size_t(m.classes));
    *correct = 0;
    for (int64_t n = 0; n < batch; ++n) {
      const int64_t label = targets[n];
      dpl::support::Require(label >= 0 && label < m.classes, "label out of range");
      m.Probabilities(images + n * m.features, &p);
      losses[n] = float(-std::log(p[size_t(label)]));
      *correct += int64_t(std::max_element(p.begin(), p.end()) - p.begin()) == label;
      if (mode == DPL_MODEL_MODE_TRAIN) Backward(m, images + n * m.features, label, p, batch);
    }
    if (mode == DPL_MODEL_MODE_EVAL) {
      counts.eval_samples += batch;
      return;
    }
    ++m.steps;
    ++counts.train_steps;
    if (m.callback != nullptr) m.callback(m.callback_context, 1);
    if (m.callback != nullptr) m.callback(m.callback_context, 0);
  });
}

dpl_status NoStateFiles(dpl_model*, const char*) {
  return dpl::support::Fail(DPL_ERR_UNSUPPORTED, "model \"v99\" writes no state files");
}

dpl_status RandomState(dpl_model* model, uint64_t* state) {
  return dpl::support::Guarded(kPluginName, [&] { *state = As(model)->steps; });
}

dpl_status SetRandomState(dpl_model* model, uint64_t state) {
  return dpl::support::Guarded(kPluginName, [&] { As(model)->steps = state; });
}

const char* LastError() {
  return dpl::support::LastError();
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_model_plugin_v99 dpl_v99_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v99);
extern "C" const dpl_model_plugin_v99 dpl_v99_model_table = {
    {sizeof(dpl_model_plugin_v99), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL,
     DPL_MODEL_ABI_VERSION_99, "v99", "0.0.99", "softmax regression of model ABI v99 (tests only)"},
    LastError,
    Create,
    Destroy,
    Describe,
    Parameter,
    SetGradientReadyCallback,
    ZeroGradients,
    Step,
    NoStateFiles,
    NoStateFiles,
    RandomState,
    SetRandomState,
};

// Training steps and evaluated samples of the process, for the test.
extern "C" DPL_PLUGIN_EXPORT void dpl_model_v99_counts(int64_t* train_steps,
                                                       int64_t* eval_samples) {
  *train_steps = counts.train_steps;
  *eval_samples = counts.eval_samples;
}
