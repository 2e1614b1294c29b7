/*
 * sample_recorder: a model (ABI v1) that learns nothing and writes down which samples each
 * training step of each rank saw, for the tests of a resumed run's data. It takes (1, 28, 28)
 * samples in 10 classes whose first two pixels spell the sample's index (pixel 0 the low byte,
 * pixel 1 the high byte, as values v / 255: written with mean 0 and std 1), and appends one line
 * of indices per training step to DIR/rank-R.txt (--model-options dir=DIR; R from the worker's
 * RANK). Its one parameter's gradient is always 0. Options after DIR, for the elastic jobs'
 * tests: step_ms=N makes each training step last N ms more (so that a machine can be stopped in
 * the middle of an epoch), by_attempt=1 writes DIR/attempt-A-rank-R.txt instead (A from the
 * worker's DPL_ATTEMPT: the ranks of each attempt apart).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpl/model_v1.h"

enum { kPixels = 28 * 28, kClasses = 10, kDirBytes = 1024 };

struct dpl_model {
  float weight[1];
  float gradient[1];
  int64_t shape[1];
  char dir[kDirBytes];
  long step_ms;
  int by_attempt;
  dpl_gradient_ready_fn gradient_ready;
  void* gradient_ready_context;
};

static _Thread_local char g_last_error[kDirBytes + 256];

static dpl_status Fail(dpl_status status, const char* message, const char* detail) {
  snprintf(g_last_error, sizeof g_last_error, "model \"sample_recorder\": %s%s", message, detail);
  return status;
}

static const char* LastError(void) {
  return g_last_error;
}

// One option after "dir=DIR,": "step_ms=N" or "by_attempt=N"; a refusal naming it otherwise.
static dpl_status ParseOption(dpl_model* model, const char* option, size_t length) {
  char text[64];
  if (length >= sizeof text) return Fail(DPL_ERR_INVALID_ARGUMENT, "option too long: ", option);
  memcpy(text, option, length);
  text[length] = '\0';
  const char* value = NULL;
  char* end = NULL;
  long number = 0;
  if (strncmp(text, "step_ms=", 8) == 0) value = text + 8;
  if (strncmp(text, "by_attempt=", 11) == 0) value = text + 11;
  if (value != NULL) number = strtol(value, &end, 10);
  if (value == NULL || end == value || *end != '\0' || number < 0) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "takes dir=DIR[,step_ms=N][,by_attempt=1]; cannot read ",
                text);
  }
  if (value == text + 8) model->step_ms = number;
  if (value == text + 11) model->by_attempt = number != 0;
  return DPL_OK;
}

static dpl_status Create(const dpl_model_config_v1* config, dpl_model** out) {
  if (config == NULL || out == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument", "");
  const char* options = config->options;
  const size_t dir_length = options ? strcspn(options, ",") : 0;
  if (options == NULL || strncmp(options, "dir=", 4) != 0 || dir_length - 4 >= kDirBytes) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "takes dir=DIR[,step_ms=N][,by_attempt=1]; got ",
                options ? options : "");
  }
  dpl_model* model = calloc(1, sizeof *model);
  if (model == NULL) return Fail(DPL_ERR_INTERNAL, "cannot allocate the model", "");
  snprintf(model->dir, sizeof model->dir, "%.*s", (int)(dir_length - 4), options + 4);
  for (const char* next = options + dir_length; *next == ',';) {
    const size_t length = strcspn(next + 1, ",");
    const dpl_status parsed = ParseOption(model, next + 1, length);
    if (parsed != DPL_OK) {
      free(model);
      return parsed;
    }
    next += 1 + length;
  }
  model->shape[0] = 1;
  *out = model;
  return DPL_OK;
}

static void Destroy(dpl_model* model) {
  free(model);
}

static dpl_status Describe(dpl_model* model, dpl_model_info_v1* info) {
  if (model == NULL || info == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument", "");
  info->input_ndim = 3;
  info->input_shape[0] = 1;
  info->input_shape[1] = 28;
  info->input_shape[2] = 28;
  info->num_classes = kClasses;
  info->parameter_count = 1;
  info->reserved = 0;
  return DPL_OK;
}

static DLTensor FloatTensor(float* data, int64_t* shape) {
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = 1;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  return tensor;
}

static dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
  if (model == NULL || parameter == NULL || index > 0) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "there is one parameter", "");
  }
  parameter->reserved = 0;
  parameter->name = "weight";
  parameter->value = FloatTensor(model->weight, model->shape);
  parameter->gradient = FloatTensor(model->gradient, model->shape);
  return DPL_OK;
}

static dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                           void* user_context) {
  if (model == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model", "");
  model->gradient_ready = callback;
  model->gradient_ready_context = user_context;
  return DPL_OK;
}

static dpl_status SetMode(dpl_model* model, dpl_model_mode mode) {
  (void)mode;
  return model == NULL ? Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model", "") : DPL_OK;
}

static dpl_status ZeroGradients(dpl_model* model) {
  if (model == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model", "");
  model->gradient[0] = 0.0f;
  return DPL_OK;
}

static dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                            float* loss) {
  if (model == NULL || input == NULL || labels == NULL || loss == NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument", "");
  }
  const char* rank = getenv("RANK");
  const char* attempt = getenv("DPL_ATTEMPT");
  char path[kDirBytes + 96];
  if (model->by_attempt) {
    snprintf(path, sizeof path, "%s/attempt-%s-rank-%s.txt", model->dir,
             attempt ? attempt : "unknown", rank ? rank : "unknown");
  } else {
    snprintf(path, sizeof path, "%s/rank-%s.txt", model->dir, rank ? rank : "unknown");
  }
  if (model->step_ms > 0) {
    const struct timespec pause = {model->step_ms / 1000, (model->step_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
  }
  FILE* file = fopen(path, "a");
  if (file == NULL) return Fail(DPL_ERR_IO, "cannot append to ", path);
  const float* pixels = (const float*)input->data;
  for (int64_t i = 0; i < input->shape[0]; ++i) {
    const float* sample = pixels + i * kPixels;
    const long index = lroundf(sample[0] * 255.0f) + 256 * lroundf(sample[1] * 255.0f);
    fprintf(file, "%s%ld", i ? " " : "", index);
  }
  fprintf(file, "\n");
  fclose(file);
  if (model->gradient_ready) model->gradient_ready(model->gradient_ready_context, 0);
  *loss = 1.0f;
  return DPL_OK;
}

static dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           double* loss_sum, int64_t* correct) {
  if (model == NULL || input == NULL || labels == NULL || loss_sum == NULL || correct == NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument", "");
  }
  *loss_sum = (double)input->shape[0];
  *correct = 0;
  return DPL_OK;
}

static dpl_status SaveState(dpl_model* model, const char* path) {
  (void)model;
  return Fail(DPL_ERR_UNSUPPORTED, "has no state file to write to ", path);
}

static dpl_status LoadState(dpl_model* model, const char* path) {
  (void)model;
  return Fail(DPL_ERR_UNSUPPORTED, "has no state file to read from ", path);
}

DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v1 sample_recorder_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1);
const dpl_model_plugin_v1 sample_recorder_table = {
    {sizeof(dpl_model_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, DPL_MODEL_ABI_VERSION_1,
     "sample_recorder", "1.0.0", "writes down which samples each step saw (tests only)"},
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
    LastError};
