/*
 * csv: a minimal, complete dpl dataset plugin. The train split is <path>/train.csv, the test
 * split <path>/test.csv; each line is one sample: an integer label >= 0, then the sample's
 * values, separated by commas ("3,0.5,1.25,-2"). Every line has the same number of values F, so
 * a sample has shape (F); the classes are the largest label + 1. Values are served as written
 * (no normalisation, no augmentation). The whole file is parsed in create, so every bad line is
 * refused there, with the file and line named.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpl/dataset.h"

#define MAX_FEATURES 1024

struct dpl_dataset {
  int64_t count;
  int64_t features;
  int64_t classes;
  float* values;   /* count x features */
  int64_t* labels; /* count */
};

/* The message of the last failure on this thread (dataset ABI: last_error is per thread). */
static _Thread_local char g_last_error[512];

static dpl_status Fail(dpl_status status, const char* format, ...) {
  va_list args;
  int used = snprintf(g_last_error, sizeof g_last_error, "dataset \"csv\": ");
  va_start(args, format);
  vsnprintf(g_last_error + used, sizeof g_last_error - (size_t)used, format, args);
  va_end(args);
  return status;
}

static const char* LastError(void) {
  return g_last_error;
}

static void Destroy(dpl_dataset* dataset) {
  if (dataset == NULL) return;
  free(dataset->values);
  free(dataset->labels);
  free(dataset);
}

/* Reads the whole file into a NUL-terminated buffer; NULL (with the error set) on failure. */
static char* ReadText(const char* path, dpl_status* status) {
  FILE* file = fopen(path, "rb");
  char* text;
  long size;
  if (file == NULL) {
    *status = Fail(errno == ENOENT ? DPL_ERR_NOT_FOUND : DPL_ERR_IO,
                   "missing data file %s; pass --data-dir with the folder holding train.csv and "
                   "test.csv",
                   path);
    return NULL;
  }
  fseek(file, 0, SEEK_END);
  size = ftell(file);
  fseek(file, 0, SEEK_SET);
  text = size >= 0 ? malloc((size_t)size + 1) : NULL;
  if (text == NULL || fread(text, 1, (size_t)size, file) != (size_t)size) {
    *status = Fail(DPL_ERR_IO, "%s: cannot read it", path);
    free(text);
    fclose(file);
    return NULL;
  }
  text[size] = '\0';
  fclose(file);
  return text;
}

/* Values per row in `values`: MAX_FEATURES until the first line said how many (its row starts at 0
 * either way). */
static int64_t Stride(const dpl_dataset* dataset) {
  return dataset->features > 0 ? dataset->features : MAX_FEATURES;
}

/* Appends one parsed line to the dataset; returns DPL_OK or the refusal. */
static dpl_status ParseLine(dpl_dataset* dataset, const char* path, int64_t line_number, char* line,
                            int64_t* capacity) {
  char* cursor = line;
  char* end;
  int64_t label, count = 0;
  errno = 0;
  label = strtoll(cursor, &end, 10);
  if (end == cursor || label < 0 || errno != 0 || (*end != ',' && *end != '\0')) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "%s:%lld: the label is not an integer >= 0", path,
                (long long)line_number);
  }
  if (dataset->count == *capacity) {
    int64_t* labels;
    float* values;
    *capacity = *capacity ? 2 * *capacity : 64;
    labels = realloc(dataset->labels, (size_t)*capacity * sizeof(int64_t));
    if (labels == NULL) return Fail(DPL_ERR_INTERNAL, "out of memory");
    dataset->labels = labels;
    values = realloc(dataset->values, (size_t)(*capacity * Stride(dataset)) * sizeof(float));
    if (values == NULL) return Fail(DPL_ERR_INTERNAL, "out of memory");
    dataset->values = values;
  }
  while (*end == ',') {
    float value;
    cursor = end + 1;
    value = strtof(cursor, &end);
    if (end == cursor || (*end != ',' && *end != '\0')) {
      return Fail(DPL_ERR_INVALID_ARGUMENT, "%s:%lld: value %lld is not a number", path,
                  (long long)line_number, (long long)(count + 1));
    }
    if (count < Stride(dataset)) dataset->values[dataset->count * Stride(dataset) + count] = value;
    ++count;
  }
  if (dataset->features == 0) {
    if (count == 0 || count > MAX_FEATURES) {
      return Fail(DPL_ERR_INVALID_ARGUMENT, "%s:%lld: a line needs 1 to %d values after its label",
                  path, (long long)line_number, MAX_FEATURES);
    }
    dataset->features = count;
  } else if (count != dataset->features) {
    return Fail(DPL_ERR_INVALID_ARGUMENT,
                "%s:%lld: %lld values after the label, but line 1 has %lld", path,
                (long long)line_number, (long long)count, (long long)dataset->features);
  }
  dataset->labels[dataset->count] = label;
  if (label + 1 > dataset->classes) dataset->classes = label + 1;
  ++dataset->count;
  return DPL_OK;
}

static dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
  char path[4096];
  char* text;
  char* line;
  char* next;
  int64_t line_number = 0, capacity = 0;
  dpl_status status = DPL_OK;
  dpl_dataset* dataset;
  g_last_error[0] = '\0';
  if (config == NULL || out == NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "NULL argument");
  *out = NULL;
  if (config->struct_size < sizeof(dpl_dataset_config_v1) || config->path == NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "config is too small or has no path");
  }
  if (config->options != NULL && config->options[0] != '\0') {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "the csv dataset has no options (got \"%.60s\")",
                config->options);
  }
  snprintf(path, sizeof path, "%s/%s", config->path,
           config->split == DPL_DATASET_SPLIT_TRAIN ? "train.csv" : "test.csv");
  text = ReadText(path, &status);
  if (text == NULL) return status;
  dataset = calloc(1, sizeof *dataset);
  if (dataset == NULL) {
    free(text);
    return Fail(DPL_ERR_INTERNAL, "out of memory");
  }
  for (line = text; line != NULL && status == DPL_OK; line = next) {
    next = strchr(line, '\n');
    if (next != NULL) *next++ = '\0';
    ++line_number;
    if (line[0] == '\0' || line[0] == '\r') continue;
    line[strcspn(line, "\r")] = '\0';
    status = ParseLine(dataset, path, line_number, line, &capacity);
  }
  free(text);
  if (status == DPL_OK && dataset->count == 0) {
    status = Fail(DPL_ERR_INVALID_ARGUMENT, "%s: holds no samples", path);
  }
  if (status != DPL_OK) {
    Destroy(dataset);
    return status;
  }
  *out = dataset;
  return DPL_OK;
}

static dpl_status Describe(dpl_dataset* dataset, dpl_dataset_info_v1* info) {
  if (dataset == NULL || info == NULL || info->struct_size < sizeof(dpl_dataset_info_v1)) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "describe: NULL argument or info too small");
  }
  memset(info->sample_shape, 0, sizeof info->sample_shape);
  info->sample_ndim = 1;
  info->sample_shape[0] = dataset->features;
  info->count = dataset->count;
  info->num_classes = dataset->classes;
  return DPL_OK;
}

static int IsHost(const DLTensor* tensor) {
  return tensor->device.device_type == kDLCPU || tensor->device.device_type == kDLCUDAHost;
}

static dpl_status FillBatch(dpl_dataset* dataset, const int64_t* indices, int64_t epoch,
                            DLTensor* input, DLTensor* labels) {
  int64_t i, n;
  float* rows;
  int64_t* targets;
  (void)epoch; /* no augmentation */
  if (dataset == NULL || input == NULL || labels == NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "fill: NULL argument");
  }
  if (input->ndim != 2 || input->shape[1] != dataset->features || input->dtype.code != kDLFloat ||
      input->dtype.bits != 32 || !IsHost(input) || input->strides != NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT,
                "fill: input must be compact float32 (n, %lld) in host "
                "memory",
                (long long)dataset->features);
  }
  n = input->shape[0];
  if (labels->ndim != 1 || labels->shape[0] != n || labels->dtype.code != kDLInt ||
      labels->dtype.bits != 64 || !IsHost(labels) || labels->strides != NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT,
                "fill: labels must be compact int64 (%lld) in host memory", (long long)n);
  }
  rows = (float*)((char*)input->data + input->byte_offset);
  targets = (int64_t*)((char*)labels->data + labels->byte_offset);
  for (i = 0; i < n; ++i) {
    if (indices[i] < 0 || indices[i] >= dataset->count) {
      return Fail(DPL_ERR_INVALID_ARGUMENT, "fill: index %lld is outside the %lld samples",
                  (long long)indices[i], (long long)dataset->count);
    }
    memcpy(rows + i * dataset->features, dataset->values + indices[i] * dataset->features,
           (size_t)dataset->features * sizeof(float));
    targets[i] = dataset->labels[indices[i]];
  }
  g_last_error[0] = '\0';
  return DPL_OK;
}

/* The one exported symbol. Its name is also the name of its type, so the table is declared
 * under another C name and DPL_PLUGIN_ENTRY_SYMBOL gives it the entry symbol's name. */
DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v1 csv_dataset_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v1);
const dpl_dataset_plugin_v1 csv_dataset_plugin = {
    {(uint32_t)sizeof(dpl_dataset_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_DATASET,
     DPL_DATASET_ABI_VERSION_1, "csv", "1.0.0",
     "label,value,... lines of train.csv and test.csv (the out-of-tree dataset template)"},
    Create,
    Destroy,
    Describe,
    FillBatch,
    LastError};
