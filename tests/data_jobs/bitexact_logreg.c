/*
 * bitexact_logreg: multinomial logistic regression on (1, 28, 28) samples in 10 classes (model ABI
 * v1), whose every result is the same bit for bit on any x86-64 CPU. A libtorch model is not:
 * BLAS and ATen pick kernels by the CPU's vector width, and each sums in its own order. Here every
 * value comes from IEEE +, -, * and / in one fixed order, exp and log are computed below rather
 * than taken from libm (whose CPU-specific variants may round differently), and the target is
 * compiled with -ffp-contract=off, so no multiply-add is fused. What the launcher adds (the
 * average of two ranks' gradients, SGD) is element-wise and built for plain x86-64, so it too
 * gives the same bits everywhere.
 *
 * It lets a test hold the launcher to losses recorded by an earlier build on another machine:
 * Fashion-MNIST through the idx dataset plugin must give exactly the losses the launcher's former
 * built-in IDX reader gave (tests/data_jobs/fashion_mnist_golden.txt).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpl/model_v1.h"

enum { kPixels = 28 * 28, kClasses = 10 };

struct dpl_model {
  float weight[kClasses * kPixels]; /* row c: the weights of class c */
  float bias[kClasses];
  float weight_gradient[kClasses * kPixels];
  float bias_gradient[kClasses];
  double weight_sum[kClasses * kPixels]; /* one step's gradient, summed in double */
  int64_t weight_shape[2];
  int64_t bias_shape[1];
  dpl_gradient_ready_fn gradient_ready;
  void* gradient_ready_context;
};

static _Thread_local char g_last_error[256];

static dpl_status Fail(dpl_status status, const char* format, ...) {
  va_list args;
  int used = snprintf(g_last_error, sizeof g_last_error, "model \"bitexact_logreg\": ");
  va_start(args, format);
  vsnprintf(g_last_error + used, sizeof g_last_error - (size_t)used, format, args);
  va_end(args);
  return status;
}

static const char* LastError(void) {
  return g_last_error;
}

/* e^x for x <= 0: x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to the 17th power
 * (the next term is below 1e-19), then scaled by 2^k, which is exact. */
static double ExpNonPositive(double x) {
  static const double kLn2High = 6.93147180369123816490e-01, kLn2Low = 1.90821492927058770002e-10;
  if (x < -745.0) return 0.0;
  const double k = floor(x * 1.44269504088896338700 + 0.5);
  const double r = (x - k * kLn2High) - k * kLn2Low;
  double term = 1.0, sum = 1.0;
  for (int n = 1; n <= 17; ++n) {
    term = term * r / n;
    sum = sum + term;
  }
  return ldexp(sum, (int)k);
}

/* ln(s) for s >= 1: s = f 2^e with f in [0.5, 1), ln f = 2 atanh(z) with z = (f - 1) / (f + 1) in
 * [-1/3, 0), summed to z^61 (the next term is below 1e-30). */
static double LogAtLeastOne(double s) {
  static const double kLn2 = 6.93147180559945286227e-01;
  int e = 0;
  const double f = frexp(s, &e);
  const double z = (f - 1.0) / (f + 1.0), z2 = z * z;
  double power = z, sum = 0.0;
  for (int n = 1; n <= 61; n += 2) {
    sum = sum + power / n;
    power = power * z2;
  }
  return e * kLn2 + 2.0 * sum;
}

/* splitmix64: the initial weights from the seed alone. */
static uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static dpl_status Create(const dpl_model_config_v1* config, dpl_model** out) {
  if (config == NULL || out == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument");
  if (config->device_type != kDLCPU) {
    return Fail(DPL_ERR_UNSUPPORTED, "computes on the CPU only; pass --device cpu");
  }
  if (config->options != NULL && config->options[0] != '\0') {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "takes no options, got \"%s\"", config->options);
  }
  dpl_model* model = calloc(1, sizeof *model);
  if (model == NULL) return Fail(DPL_ERR_INTERNAL, "cannot allocate the model");
  uint64_t state = config->seed;
  const float bound = 1.0f / 28.0f; /* torch.nn.Linear's 1 / sqrt(in_features) */
  for (int i = 0; i < kClasses * kPixels; ++i) {
    const float unit = (float)(NextRandom(&state) >> 40) * (1.0f / 16777216.0f);
    model->weight[i] = (2.0f * unit - 1.0f) * bound;
  }
  for (int c = 0; c < kClasses; ++c) {
    const float unit = (float)(NextRandom(&state) >> 40) * (1.0f / 16777216.0f);
    model->bias[c] = (2.0f * unit - 1.0f) * bound;
  }
  model->weight_shape[0] = kClasses;
  model->weight_shape[1] = kPixels;
  model->bias_shape[0] = kClasses;
  *out = model;
  return DPL_OK;
}

static void Destroy(dpl_model* model) {
  free(model);
}

static dpl_status Describe(dpl_model* model, dpl_model_info_v1* info) {
  if (model == NULL || info == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument");
  info->input_ndim = 3;
  info->input_shape[0] = 1;
  info->input_shape[1] = 28;
  info->input_shape[2] = 28;
  info->num_classes = kClasses;
  info->parameter_count = 2;
  info->reserved = 0;
  return DPL_OK;
}

static DLTensor FloatTensor(float* data, int32_t ndim, int64_t* shape) {
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.ndim = ndim;
  tensor.dtype.code = kDLFloat;
  tensor.dtype.bits = 32;
  tensor.dtype.lanes = 1;
  tensor.shape = shape;
  return tensor;
}

static dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
  if (model == NULL || parameter == NULL || index > 1) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "no parameter %u (there are 2)", index);
  }
  parameter->reserved = 0;
  if (index == 0) {
    parameter->name = "linear.weight";
    parameter->value = FloatTensor(model->weight, 2, model->weight_shape);
    parameter->gradient = FloatTensor(model->weight_gradient, 2, model->weight_shape);
  } else {
    parameter->name = "linear.bias";
    parameter->value = FloatTensor(model->bias, 1, model->bias_shape);
    parameter->gradient = FloatTensor(model->bias_gradient, 1, model->bias_shape);
  }
  return DPL_OK;
}

static dpl_status SetGradientReadyCallback(dpl_model* model, dpl_gradient_ready_fn callback,
                                           void* user_context) {
  if (model == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model");
  model->gradient_ready = callback;
  model->gradient_ready_context = user_context;
  return DPL_OK;
}

static dpl_status SetMode(dpl_model* model, dpl_model_mode mode) {
  (void)mode; /* no dropout: both modes compute alike */
  return model == NULL ? Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model") : DPL_OK;
}

static dpl_status ZeroGradients(dpl_model* model) {
  if (model == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL model");
  memset(model->weight_gradient, 0, sizeof model->weight_gradient);
  memset(model->bias_gradient, 0, sizeof model->bias_gradient);
  return DPL_OK;
}

/* Checks a batch: float32 (n, 1, 28, 28) or (n, 28, 28) input, int64 (n) labels in range. */
static dpl_status CheckBatch(const DLTensor* input, const DLTensor* labels, int64_t* n) {
  if (input == NULL || labels == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL batch");
  int64_t elements = 1;
  for (int32_t d = 1; d < input->ndim; ++d) elements *= input->shape[d];
  if (input->dtype.code != kDLFloat || input->dtype.bits != 32 || input->ndim < 2 ||
      elements != kPixels || labels->dtype.code != kDLInt || labels->dtype.bits != 64 ||
      labels->ndim != 1 || labels->shape[0] != input->shape[0]) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "takes float32 (n, 1, 28, 28) input, int64 (n) labels");
  }
  const int64_t* label = (const int64_t*)labels->data;
  for (int64_t i = 0; i < input->shape[0]; ++i) {
    if (label[i] < 0 || label[i] >= kClasses) {
      return Fail(DPL_ERR_INVALID_ARGUMENT, "label %lld is not a class in [0, 10)",
                  (long long)label[i]);
    }
  }
  *n = input->shape[0];
  return DPL_OK;
}

/* The log-probabilities of one sample's classes: logits summed in double in pixel order, then
 * log-softmax (the largest logit subtracted first). */
static void LogProbabilities(const dpl_model* model, const float* pixels, double* log_p) {
  double logits[kClasses], largest = -INFINITY;
  for (int c = 0; c < kClasses; ++c) {
    double sum = model->bias[c];
    const float* row = model->weight + c * kPixels;
    for (int j = 0; j < kPixels; ++j) sum = sum + (double)row[j] * (double)pixels[j];
    logits[c] = sum;
    if (sum > largest) largest = sum;
  }
  double total = 0.0;
  for (int c = 0; c < kClasses; ++c) total = total + ExpNonPositive(logits[c] - largest);
  const double log_total = LogAtLeastOne(total);
  for (int c = 0; c < kClasses; ++c) log_p[c] = (logits[c] - largest) - log_total;
}

static dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                            float* loss) {
  int64_t n = 0;
  if (model == NULL || loss == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument");
  const dpl_status checked = CheckBatch(input, labels, &n);
  if (checked != DPL_OK) return checked;
  const float* pixels = (const float*)input->data;
  const int64_t* label = (const int64_t*)labels->data;
  double bias_sum[kClasses] = {0}, loss_sum = 0.0;
  memset(model->weight_sum, 0, sizeof model->weight_sum);
  for (int64_t i = 0; i < n; ++i) {
    const float* sample = pixels + i * kPixels;
    double log_p[kClasses];
    LogProbabilities(model, sample, log_p);
    loss_sum = loss_sum - log_p[label[i]];
    for (int c = 0; c < kClasses; ++c) {
      /* d(mean loss) / d(logit c) = (p_c - [c == label]) / n */
      const double d_logit = (ExpNonPositive(log_p[c]) - (c == label[i] ? 1.0 : 0.0)) / (double)n;
      bias_sum[c] = bias_sum[c] + d_logit;
      double* row = model->weight_sum + c * kPixels;
      for (int j = 0; j < kPixels; ++j) row[j] = row[j] + d_logit * (double)sample[j];
    }
  }
  for (int c = 0; c < kClasses; ++c) model->bias_gradient[c] += (float)bias_sum[c];
  if (model->gradient_ready) model->gradient_ready(model->gradient_ready_context, 1);
  for (int i = 0; i < kClasses * kPixels; ++i)
    model->weight_gradient[i] += (float)model->weight_sum[i];
  if (model->gradient_ready) model->gradient_ready(model->gradient_ready_context, 0);
  *loss = (float)(loss_sum / (double)n);
  return DPL_OK;
}

static dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           double* loss_sum, int64_t* correct) {
  int64_t n = 0;
  if (model == NULL || loss_sum == NULL || correct == NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument");
  }
  const dpl_status checked = CheckBatch(input, labels, &n);
  if (checked != DPL_OK) return checked;
  const float* pixels = (const float*)input->data;
  const int64_t* label = (const int64_t*)labels->data;
  *loss_sum = 0.0;
  *correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    double log_p[kClasses];
    LogProbabilities(model, pixels + i * kPixels, log_p);
    *loss_sum = *loss_sum - log_p[label[i]];
    int best = 0;
    for (int c = 1; c < kClasses; ++c) {
      if (log_p[c] > log_p[best]) best = c;
    }
    if (best == label[i]) ++*correct;
  }
  return DPL_OK;
}

/* The state file: the weights, then the biases, as raw float32. */
static dpl_status SaveState(dpl_model* model, const char* path) {
  FILE* file = fopen(path, "wb");
  if (file == NULL) return Fail(DPL_ERR_IO, "cannot create %s", path);
  const int written = fwrite(model->weight, sizeof model->weight, 1, file) == 1 &&
                      fwrite(model->bias, sizeof model->bias, 1, file) == 1;
  return fclose(file) == 0 && written ? DPL_OK : Fail(DPL_ERR_IO, "cannot write %s", path);
}

static dpl_status LoadState(dpl_model* model, const char* path) {
  FILE* file = fopen(path, "rb");
  if (file == NULL) return Fail(DPL_ERR_NOT_FOUND, "cannot open %s", path);
  const int read = fread(model->weight, sizeof model->weight, 1, file) == 1 &&
                   fread(model->bias, sizeof model->bias, 1, file) == 1;
  fclose(file);
  return read ? DPL_OK : Fail(DPL_ERR_INVALID_ARGUMENT, "%s is not a bitexact_logreg state", path);
}

DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v1 bitexact_logreg_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1);
const dpl_model_plugin_v1 bitexact_logreg_table = {
    {sizeof(dpl_model_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, DPL_MODEL_ABI_VERSION_1,
     "bitexact_logreg", "1.0.0",
     "logistic regression with the same bits on every CPU (tests only)"},
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
