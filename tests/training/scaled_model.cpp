// A model plugin for the mixed-precision tests, of model ABI v4 and without libtorch, so it builds
// in seconds: softmax regression (Linear(784, 10), mean cross-entropy) computed in float32 for
// every --precision, fp16 included, which the libtorch helper refuses on a CPU. It honours
// set_loss_scale (the gradients are the scale times the loss's, the loss reported unscaled) and
// can put an inf into one rank's gradient at one step. Options:
//   inf_rank=R  the rank whose gradient gets the inf (-1, the default: none)
//   inf_step=S  at its S-th train_step of the run (from 1; default 1)
//   perturb_rank=R  the rank whose fc.bias[0] grows by 0.001, as a faulty plugin might change a
//                   parameter outside the optimizer (-1, the default: none); not by one float:
//                   the updates that follow could round the two values back together
//   perturb_step=S  at its S-th train_step (from 1; default 1)
//   ballast=N   a third parameter of N floats that nothing uses (zero gradients), to make
//               checkpoints large (default 0: none)
// The train_step counter is the model's "random state" (rng_state), so a resumed run counts on
// from the checkpoint's step as a straight one does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dpl/model_v4.h"
#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"

namespace {

using dpl::support::PluginError;

constexpr const char* kPluginName = "model \"scaled\"";
constexpr int64_t kClasses = 10;
constexpr int64_t kFeatures = 28 * 28;
constexpr int64_t kWeights = kClasses * kFeatures;
constexpr float kPerturbation = 0.001f;

struct HostSlot {
  std::vector<float> input;
  std::vector<int64_t> labels;
  int64_t input_shape[4] = {0, 1, 28, 28};
  int64_t label_shape[1] = {0};
};

struct ScaledModel {
  // Parameters back to back: the weight (10, 784), then the bias (10), then the ballast, if any;
  // gradients alike.
  std::vector<float> values = std::vector<float>(kWeights + kClasses, 0.0f);
  std::vector<float> gradients = std::vector<float>(kWeights + kClasses, 0.0f);
  int64_t weight_shape[2] = {kClasses, kFeatures};
  int64_t bias_shape[1] = {kClasses};
  int64_t ballast_shape[1] = {0};
  HostSlot slots[DPL_MODEL_HOST_BATCH_SLOTS];
  int rank = 0;
  int64_t inf_rank = -1;
  int64_t inf_step = 1;
  int64_t perturb_rank = -1;
  int64_t perturb_step = 1;
  uint64_t steps = 0;  // train_steps of the run (the "random state")
  float loss_scale = 1.0f;
  dpl_gradient_ready_fn callback = nullptr;
  void* callback_context = nullptr;

  // softmax(W x + b) of sample `x`, in double.
  void Probabilities(const float* x, double* p) const {
    double largest = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < kClasses; ++c) {
      double z = values[size_t(kWeights + c)];
      const float* w = values.data() + c * kFeatures;
      for (int64_t i = 0; i < kFeatures; ++i) z += double(w[i]) * double(x[i]);
      p[c] = z;
      largest = std::max(largest, z);
    }
    double total = 0.0;
    for (int64_t c = 0; c < kClasses; ++c) total += p[c] = std::exp(p[c] - largest);
    for (int64_t c = 0; c < kClasses; ++c) p[c] /= total;
  }
};

ScaledModel* As(dpl_model* model) {
  if (model == nullptr) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "model handle is NULL");
  return reinterpret_cast<ScaledModel*>(model);
}

DLTensor HostTensor(void* data, DLDataType dtype, int32_t ndim, int64_t* shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = {kDLCPU, 0};
  tensor.ndim = ndim;
  tensor.dtype = dtype;
  tensor.shape = shape;
  return tensor;
}

constexpr DLDataType kFloat32{kDLFloat, 32, 1};

void CheckBatch(const DLTensor* input, const DLTensor* labels) {
  const bool images = input != nullptr && input->ndim == 4 && input->dtype.code == kDLFloat &&
                      input->dtype.bits == 32 &&
                      input->shape[1] * input->shape[2] * input->shape[3] == kFeatures;
  const bool classes = labels != nullptr && labels->ndim == 1 && labels->dtype.code == kDLInt &&
                       labels->dtype.bits == 64 && labels->shape[0] == input->shape[0];
  if (!images || !classes) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT,
                      "the batch must be float32 (batch, 1, 28, 28) images and int64 labels");
  }
}

int64_t LabelAt(const DLTensor* labels, int64_t i) {
  const int64_t label = static_cast<const int64_t*>(labels->data)[i];
  if (label < 0 || label >= kClasses) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "label " + std::to_string(label) + " out of range");
  }
  return label;
}

dpl_status Create(const dpl_model_config_v4* config, dpl_model** out) {
  return dpl::support::Guarded(kPluginName, [&] {
    if (config == nullptr || out == nullptr || config->struct_size < sizeof(dpl_model_config_v4)) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "needs a model ABI v4 config");
    }
    const dpl::support::KeyValueOptions options(config->options, "--model-options");
    auto model = std::make_unique<ScaledModel>();
    model->inf_rank = options.GetInt("inf_rank", -1);
    model->inf_step = options.GetInt("inf_step", 1);
    model->perturb_rank = options.GetInt("perturb_rank", -1);
    model->perturb_step = options.GetInt("perturb_step", 1);
    model->ballast_shape[0] = options.GetInt("ballast", 0);
    options.CheckAllKnown();
    if (model->ballast_shape[0] < 0) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "ballast < 0");
    model->values.resize(size_t(kWeights + kClasses + model->ballast_shape[0]), 0.0f);
    model->gradients.resize(model->values.size(), 0.0f);
    model->rank = config->rank;
    // Small weights from the seed (a 64-bit LCG), alike on every rank.
    uint64_t state = config->seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < kWeights; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      model->values[size_t(i)] = (float(state >> 40) / float(1 << 24) - 0.5f) * 0.02f;
    }
    *out = reinterpret_cast<dpl_model*>(model.release());
  });
}

void Destroy(dpl_model* model) {
  delete reinterpret_cast<ScaledModel*>(model);
}

dpl_status Describe(dpl_model* model, dpl_model_info_v4* info) {
  return dpl::support::Guarded(kPluginName, [&] {
    const ScaledModel& m = *As(model);
    info->input_ndim = 3;
    const int64_t shape[DPL_MODEL_MAX_INPUT_DIMS] = {1, 28, 28};
    std::copy(shape, shape + DPL_MODEL_MAX_INPUT_DIMS, info->input_shape);
    info->num_classes = kClasses;
    info->parameter_count = m.ballast_shape[0] > 0 ? 3 : 2;
    info->reserved = 0;
    info->buffer_count = 0;
    info->flags = 0;
    info->stream = nullptr;
    info->input = dpl_sample_tensor_v2{{kDLFloat, 32, 1}, 3, {1, 28, 28}};
    info->target = dpl_sample_tensor_v2{{kDLInt, 64, 1}, 0, {}};
  });
}

dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter) {
  return dpl::support::Guarded(kPluginName, [&] {
    ScaledModel& m = *As(model);
    if (index > (m.ballast_shape[0] > 0 ? 2 : 1))
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "no parameter " + std::to_string(index));
    const size_t offsets[3] = {0, size_t(kWeights), size_t(kWeights + kClasses)};
    const size_t offset = offsets[index];
    const char* names[3] = {"fc.weight", "fc.bias", "ballast"};
    parameter->name = names[index];
    parameter->reserved = 0;
    int64_t* shapes[3] = {m.weight_shape, m.bias_shape, m.ballast_shape};
    int64_t* shape = shapes[index];
    const int32_t ndim = index == 0 ? 2 : 1;
    parameter->value = HostTensor(m.values.data() + offset, kFloat32, ndim, shape);
    parameter->gradient = HostTensor(m.gradients.data() + offset, kFloat32, ndim, shape);
  });
}

dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                    void* context) {
  return dpl::support::Guarded(kPluginName, [&] {
    As(model)->callback = callback;
    As(model)->callback_context = context;
  });
}

dpl_status SetMode(dpl_model*, dpl_model_mode) {
  return DPL_OK;
}

dpl_status ZeroGradients(dpl_model* model) {
  return dpl::support::Guarded(kPluginName, [&] {
    std::fill(As(model)->gradients.begin(), As(model)->gradients.end(), 0.0f);
  });
}

dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels, float* loss) {
  return dpl::support::Guarded(kPluginName, [&] {
    ScaledModel& m = *As(model);
    CheckBatch(input, labels);
    ++m.steps;
    if (m.rank == m.perturb_rank && int64_t(m.steps) == m.perturb_step) {
      m.values[size_t(kWeights)] += kPerturbation;
    }
    const int64_t batch = labels->shape[0];
    const float* images = static_cast<const float*>(input->data);
    std::vector<double> weight_sum(size_t(kWeights), 0.0), bias_sum(size_t(kClasses), 0.0);
    double total = 0.0, p[kClasses];
    for (int64_t n = 0; n < batch; ++n) {
      const float* x = images + n * kFeatures;
      m.Probabilities(x, p);
      const int64_t label = LabelAt(labels, n);
      total -= std::log(p[label]);
      for (int64_t c = 0; c < kClasses; ++c) {
        const double d = p[c] - (c == label ? 1.0 : 0.0);
        bias_sum[size_t(c)] += d;
        for (int64_t i = 0; i < kFeatures; ++i) weight_sum[size_t(c * kFeatures + i)] += d * x[i];
      }
    }
    // backward of (mean loss * scale), accumulated into the gradients in float32.
    const double factor = double(m.loss_scale) / double(batch);
    for (int64_t i = 0; i < kWeights; ++i)
      m.gradients[size_t(i)] += float(weight_sum[size_t(i)] * factor);
    if (m.callback != nullptr) m.callback(m.callback_context, 0);
    for (int64_t c = 0; c < kClasses; ++c) {
      m.gradients[size_t(kWeights + c)] += float(bias_sum[size_t(c)] * factor);
    }
    if (m.rank == m.inf_rank && int64_t(m.steps) == m.inf_step) {
      m.gradients[size_t(kWeights)] = std::numeric_limits<float>::infinity();
    }
    if (m.callback != nullptr) m.callback(m.callback_context, 1);
    if (m.callback != nullptr && m.ballast_shape[0] > 0) m.callback(m.callback_context, 2);
    *loss = float(total / double(batch));
  });
}

dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                    dpl_eval_result_v4* result) {
  return dpl::support::Guarded(kPluginName, [&] {
    const ScaledModel& m = *As(model);
    CheckBatch(input, labels);
    const float* images = static_cast<const float*>(input->data);
    double p[kClasses];
    result->loss_sum = 0.0;
    result->correct = 0;
    result->elements = labels->shape[0];
    for (int64_t n = 0; n < labels->shape[0]; ++n) {
      m.Probabilities(images + n * kFeatures, p);
      const int64_t label = LabelAt(labels, n);
      result->loss_sum -= std::log(p[label]);
      result->correct += int64_t(std::max_element(p, p + kClasses) - p) == label;
    }
  });
}

dpl_status Unsupported(const char* what) {
  return dpl::support::Fail(DPL_ERR_UNSUPPORTED,
                            std::string(kPluginName) + ": " + what + " is not implemented");
}

dpl_status SaveState(dpl_model*, const char*) {
  return Unsupported("save_state");
}

dpl_status LoadState(dpl_model*, const char*) {
  return Unsupported("load_state");
}

const char* LastError() {
  return dpl::support::LastError();
}

dpl_status HostBatchSlot(dpl_model* model, uint32_t slot, int64_t capacity, DLTensor* input,
                         DLTensor* labels) {
  return dpl::support::Guarded(kPluginName, [&] {
    if (slot >= DPL_MODEL_HOST_BATCH_SLOTS || capacity < 1) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "no host batch slot " + std::to_string(slot) +
                                                      " of capacity " + std::to_string(capacity));
    }
    HostSlot& s = As(model)->slots[slot];
    s.input.assign(size_t(capacity * kFeatures), 0.0f);
    s.labels.assign(size_t(capacity), 0);
    s.input_shape[0] = capacity;
    s.label_shape[0] = capacity;
    *input = HostTensor(s.input.data(), kFloat32, 4, s.input_shape);
    *labels = HostTensor(s.labels.data(), DLDataType{kDLInt, 64, 1}, 1, s.label_shape);
  });
}

dpl_status HostBatch(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* labels) {
  return HostBatchSlot(model, 0, capacity, input, labels);
}

dpl_status ReadTensors(dpl_model* model, dpl_model_tensors which, float* host, uint64_t count) {
  return dpl::support::Guarded(kPluginName, [&] {
    ScaledModel& m = *As(model);
    const std::vector<float>& from = which == DPL_MODEL_TENSORS_VALUES ? m.values : m.gradients;
    if (count != from.size()) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "wrong count");
    std::copy(from.begin(), from.end(), host);
  });
}

dpl_status WriteTensors(dpl_model* model, dpl_model_tensors which, const float* host,
                        uint64_t count) {
  return dpl::support::Guarded(kPluginName, [&] {
    ScaledModel& m = *As(model);
    std::vector<float>& to = which == DPL_MODEL_TENSORS_VALUES ? m.values : m.gradients;
    if (count != to.size()) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "wrong count");
    std::copy(host, host + count, to.begin());
  });
}

dpl_status Buffer(dpl_model*, uint32_t index, dpl_buffer_v3*) {
  return dpl::support::Fail(DPL_ERR_INVALID_ARGUMENT, "no buffer " + std::to_string(index));
}

dpl_status NoBuffers(dpl_model*, uint64_t bytes) {
  if (bytes == 0) return DPL_OK;
  return dpl::support::Fail(DPL_ERR_INVALID_ARGUMENT, "the model has no buffers");
}

dpl_status ReadBuffers(dpl_model* model, void*, uint64_t bytes) {
  return NoBuffers(model, bytes);
}

dpl_status WriteBuffers(dpl_model* model, const void*, uint64_t bytes) {
  return NoBuffers(model, bytes);
}

dpl_status RngState(dpl_model* model, void* state, uint64_t capacity, uint64_t* size) {
  return dpl::support::Guarded(kPluginName, [&] {
    *size = sizeof(uint64_t);
    if (capacity < *size) throw PluginError(DPL_ERR_BUFFER_TOO_SMALL, "needs 8 bytes");
    std::memcpy(state, &As(model)->steps, sizeof(uint64_t));
  });
}

dpl_status SetRngState(dpl_model* model, const void* state, uint64_t size) {
  return dpl::support::Guarded(kPluginName, [&] {
    if (size != sizeof(uint64_t)) throw PluginError(DPL_ERR_INVALID_ARGUMENT, "not 8 bytes");
    std::memcpy(&As(model)->steps, state, sizeof(uint64_t));
  });
}

dpl_status SetLossScale(dpl_model* model, float scale) {
  return dpl::support::Guarded(kPluginName, [&] {
    if (!(scale > 0.0f) || !std::isfinite(scale)) {
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "loss scale must be positive and finite");
    }
    As(model)->loss_scale = scale;
  });
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_model_plugin_v4 dpl_scaled_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
extern "C" const dpl_model_plugin_v4 dpl_scaled_model_table = {
    // A v4 table of the first size (before share_parameters): such a plugin still loads.
    {DPL_MODEL_PLUGIN_V4_FIRST_SIZE, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL,
     DPL_MODEL_ABI_VERSION_4, "scaled", "1.0.0",
     "softmax regression in float32 that takes any precision (tests only)"},
    Create,
    Destroy,
    Describe,
    Parameter,
    SetGradientReadyCallback,
    SetMode,
    ZeroGradients,
    TrainStep,
    EvalStep,
    SaveState,
    LoadState,
    LastError,
    HostBatch,
    ReadTensors,
    WriteTensors,
    Buffer,
    ReadBuffers,
    WriteBuffers,
    RngState,
    SetRngState,
    HostBatchSlot,
    SetLossScale,
    nullptr,  // set_optimizer: the host runs the optimizer
    nullptr,
    nullptr,
    nullptr,  // share_parameters and share_gradients: past the table's end (header.struct_size)
    nullptr,
};
