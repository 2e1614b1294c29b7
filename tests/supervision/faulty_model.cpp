// A model plugin for the supervision tests, of model ABI v1 and without libtorch, so it builds in
// seconds: a classifier whose parameter is the bias of 10 logits (softmax cross-entropy), whose
// train_step fails on purpose on one rank, and which a test can hold at a moment of a step.
// Options:
//   fail_rank=R  the rank whose train_step fails (-1, the default: none)
//   fail_step=S  its S-th train_step fails (from 1; default 1)
//   step_ms=M    every train_step sleeps M ms first, so a test can act while the job runs
//   slow_rank=R  a straggler: from its slow_step-th train_step on (from 1; default 1), rank R's
//                train_steps sleep slow_ms ms (default 100) more
//   abort_in_create=1  create aborts the process (SIGABRT), as a plugin with a bug may
//   extra=N      a second parameter of N floats whose gradient stays 0: bigger allreduces,
//                optimizer steps and checkpoints, so that a test can act while one is under way
//   hold_dir=DIR the test holds a rank at a moment of its step: when the file
//                DIR/hold-<rank>-<moment> exists as the rank reaches <moment>, the rank renames
//                it to DIR/held-<rank>-<moment> and sleeps hold_ms (default 60000) there. Moments:
//                forward (train_step begins), backward (the gradient is computed, not yet
//                reported), reported (the gradients went to the allreduce), optimizer (the
//                optimizer step is done: zero_gradients)
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dpl/model_v1.h"
#include "dpl/support/error.hpp"
#include "dpl/support/options.hpp"

namespace {

using dpl::support::PluginError;

constexpr const char* kPluginName = "model \"faulty\"";
constexpr int64_t kClasses = 10;

// Model ABI v1 tells a model no rank; the launcher names each worker process "dpl-rank-<rank>"
// (what `ps` shows), which is enough for a test plugin.
int OwnRank() {
  char name[17] = {};
  prctl(PR_GET_NAME, name);
  int rank = -1;
  return std::sscanf(name, "dpl-rank-%d", &rank) == 1 ? rank : -1;
}

struct FaultyModel {
  float bias[kClasses] = {};
  float gradient[kClasses] = {};
  int64_t shape[1] = {kClasses};
  int rank = -1;
  int64_t fail_rank = -1;
  int64_t fail_step = 1;
  int64_t step_ms = 0;
  int64_t slow_rank = -1;
  int64_t slow_step = 1;
  int64_t slow_ms = 100;
  int64_t steps = 0;
  std::vector<float> extra, extra_gradient;
  int64_t extra_shape[1] = {0};
  std::string hold_dir;
  int64_t hold_ms = 60000;
  bool stepped = false;  // a train_step since the last zero_gradients
  dpl_gradient_ready_fn callback = nullptr;
  void* callback_context = nullptr;

  // softmax(bias): the same prediction for every sample.
  void Probabilities(double* p) const {
    double largest = bias[0], total = 0.0;
    for (int64_t c = 1; c < kClasses; ++c) largest = std::max(largest, double(bias[c]));
    for (int64_t c = 0; c < kClasses; ++c) total += p[c] = std::exp(double(bias[c]) - largest);
    for (int64_t c = 0; c < kClasses; ++c) p[c] /= total;
  }
};

// Holds this rank at `moment` when the test asked for it (hold_dir).
void MaybeHold(const FaultyModel& m, const char* moment) {
  if (m.hold_dir.empty()) return;
  const std::string name = std::to_string(m.rank) + "-" + moment;
  const std::string request = m.hold_dir + "/hold-" + name;
  if (std::rename(request.c_str(), (m.hold_dir + "/held-" + name).c_str()) != 0) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(m.hold_ms));
}

FaultyModel* As(dpl_model* model) {
  return reinterpret_cast<FaultyModel*>(model);
}

DLTensor Vector(float* data, int64_t* shape) {
  DLTensor tensor{};
  tensor.data = data;
  tensor.device = {kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = {kDLFloat, 32, 1};
  tensor.shape = shape;
  return tensor;
}

int64_t LabelAt(const DLTensor* labels, int64_t i) {
  const int64_t label = static_cast<const int64_t*>(labels->data)[i];
  if (label < 0 || label >= kClasses) {
    throw PluginError(DPL_ERR_INVALID_ARGUMENT, "label " + std::to_string(label) + " out of range");
  }
  return label;
}

dpl_status Create(const dpl_model_config_v1* config, dpl_model** out) {
  return dpl::support::Guarded(kPluginName, [&] {
    const dpl::support::KeyValueOptions options(config->options, "--model-options");
    auto model = std::make_unique<FaultyModel>();
    model->fail_rank = options.GetInt("fail_rank", -1);
    model->fail_step = options.GetInt("fail_step", 1);
    model->step_ms = options.GetInt("step_ms", 0);
    model->slow_rank = options.GetInt("slow_rank", -1);
    model->slow_step = options.GetInt("slow_step", 1);
    model->slow_ms = options.GetInt("slow_ms", 100);
    const int64_t extra = options.GetInt("extra", 0);
    model->extra.assign(size_t(std::max<int64_t>(extra, 0)), 0.0f);
    model->extra_gradient.assign(model->extra.size(), 0.0f);
    model->extra_shape[0] = int64_t(model->extra.size());
    model->hold_dir = options.GetString("hold_dir", "");
    model->hold_ms = options.GetInt("hold_ms", 60000);
    const bool abort_in_create = options.GetInt("abort_in_create", 0) != 0;
    options.CheckAllKnown();
    if (abort_in_create) std::abort();
    model->rank = OwnRank();
    *out = reinterpret_cast<dpl_model*>(model.release());
  });
}

void Destroy(dpl_model* model) {
  delete As(model);
}

dpl_status Describe(dpl_model* model, dpl_model_info_v1* info) {
  info->input_ndim = 3;
  info->input_shape[0] = 1;
  info->input_shape[1] = 28;
  info->input_shape[2] = 28;
  info->num_classes = kClasses;
  info->parameter_count = As(model)->extra.empty() ? 1 : 2;
  return DPL_OK;
}

dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
  return dpl::support::Guarded(kPluginName, [&] {
    FaultyModel& m = *As(model);
    if (index == 1 && !m.extra.empty()) {
      parameter->name = "extra";
      parameter->value = Vector(m.extra.data(), m.extra_shape);
      parameter->gradient = Vector(m.extra_gradient.data(), m.extra_shape);
      return;
    }
    if (index != 0)
      throw PluginError(DPL_ERR_INVALID_ARGUMENT, "no parameter " + std::to_string(index));
    parameter->name = "bias";
    parameter->value = Vector(m.bias, m.shape);
    parameter->gradient = Vector(m.gradient, m.shape);
  });
}

dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                    void* context) {
  As(model)->callback = callback;
  As(model)->callback_context = context;
  return DPL_OK;
}

dpl_status SetMode(dpl_model*, dpl_model_mode) {
  return DPL_OK;
}

dpl_status ZeroGradients(dpl_model* model) {
  FaultyModel& m = *As(model);
  if (m.stepped) MaybeHold(m, "optimizer");  // not the zeroing at an epoch's start
  m.stepped = false;
  std::memset(m.gradient, 0, sizeof m.gradient);
  std::fill(m.extra_gradient.begin(), m.extra_gradient.end(), 0.0f);
  return DPL_OK;
}

dpl_status TrainStep(dpl_model* model, const DLTensor*, const DLTensor* labels, float* loss) {
  return dpl::support::Guarded(kPluginName, [&] {
    FaultyModel& m = *As(model);
    ++m.steps;
    m.stepped = true;
    MaybeHold(m, "forward");
    if (m.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(m.step_ms));
    if (m.rank == m.slow_rank && m.steps >= m.slow_step) {
      std::this_thread::sleep_for(std::chrono::milliseconds(m.slow_ms));
    }
    if (m.rank == m.fail_rank && m.steps == m.fail_step) {
      throw PluginError(DPL_ERR_INTERNAL, "train_step fails on purpose on rank " +
                                              std::to_string(m.rank) + " at step " +
                                              std::to_string(m.steps));
    }
    double p[kClasses];
    m.Probabilities(p);
    const int64_t batch = labels->shape[0];
    double total = 0.0;
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t label = LabelAt(labels, i);
      total -= std::log(p[label]);
      for (int64_t c = 0; c < kClasses; ++c) {
        m.gradient[c] += float((p[c] - (c == label ? 1.0 : 0.0)) / double(batch));
      }
    }
    *loss = batch > 0 ? float(total / double(batch)) : 0.0f;
    MaybeHold(m, "backward");
    if (m.callback != nullptr) {
      if (!m.extra.empty()) m.callback(m.callback_context, 1);
      m.callback(m.callback_context, 0);
    }
    MaybeHold(m, "reported");
  });
}

dpl_status EvalStep(dpl_model* model, const DLTensor*, const DLTensor* labels, double* loss_sum,
                    int64_t* correct) {
  return dpl::support::Guarded(kPluginName, [&] {
    const FaultyModel& m = *As(model);
    double p[kClasses];
    m.Probabilities(p);
    int64_t best = 0;
    for (int64_t c = 1; c < kClasses; ++c) best = p[c] > p[best] ? c : best;
    *loss_sum = 0.0;
    *correct = 0;
    for (int64_t i = 0; i < labels->shape[0]; ++i) {
      const int64_t label = LabelAt(labels, i);
      *loss_sum -= std::log(p[label]);
      *correct += label == best;
    }
  });
}

dpl_status SaveState(dpl_model* model, const char* path) {
  return dpl::support::Guarded(kPluginName, [&] {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(As(model)->bias), sizeof As(model)->bias);
    if (!file) throw PluginError(DPL_ERR_IO, std::string("cannot write ") + path);
  });
}

dpl_status LoadState(dpl_model* model, const char* path) {
  return dpl::support::Guarded(kPluginName, [&] {
    std::ifstream file(path, std::ios::binary);
    file.read(reinterpret_cast<char*>(As(model)->bias), sizeof As(model)->bias);
    if (!file) throw PluginError(DPL_ERR_IO, std::string("cannot read ") + path);
  });
}

const char* LastError() {
  return dpl::support::LastError();
}

}  // namespace

extern "C" DPL_PLUGIN_EXPORT const dpl_model_plugin_v1 dpl_faulty_model_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1);
extern "C" const dpl_model_plugin_v1 dpl_faulty_model_table = {
    {sizeof(dpl_model_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, DPL_MODEL_ABI_VERSION_1,
     "faulty", "1.0.0", "a bias-only classifier whose train_step fails on one rank (tests only)"},
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
};
