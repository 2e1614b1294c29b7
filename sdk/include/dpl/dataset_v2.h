/*
 * dpl SDK, dataset ABI version 2 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 1 (dpl/dataset_v1.h) holds, with one change: a sample is TYPED. It is an
 * input tensor and a target tensor, each with its own dtype and shape:
 *  - image classification: input float32 (1, 28, 28), target int64 of shape () (one class);
 *  - a language model: input int64 (T) token ids, target int64 (T), the next token per position;
 *  - regression: a float32 target of any shape.
 * `describe` reports both, and the number of classes (for token data: the vocabulary), so the
 * host can tell the model (model ABI v4) what it will see and refuse a mismatch before training.
 *
 * The sample count is fixed for the life of the instance (every epoch has `count` samples).
 * A plugin that cuts samples out of a stream (token windows) chooses a count that every epoch's
 * cut can serve.
 *
 * The host adapts version-1 plugins: their input is float32 of sample_shape, their target int64
 * of shape ().
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v2 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v2);
 * with header.kind = DPL_PLUGIN_KIND_DATASET and header.abi_version = 2.
 */
#ifndef DPL_DATASET_V2_H
#define DPL_DATASET_V2_H

#include "dpl/dataset_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_DATASET_ABI_VERSION_2 2u

/* The config of version 1, unchanged; the host writes DPL_DATASET_ABI_VERSION_2 into
 * `version`. dpl_dataset_split grows: DPL_DATASET_SPLIT_VALIDATION (2) is the split evaluated
 * while training (--eval-every); a plugin whose data has no separate validation part serves its
 * test part for it, or refuses it with DPL_ERR_NOT_FOUND naming what is missing. */
typedef dpl_dataset_config_v1 dpl_dataset_config_v2;
#define DPL_DATASET_SPLIT_VALIDATION 2

/* One tensor of a sample: its element type (DLPack's) and shape. ndim 0 is a scalar. */
typedef struct dpl_sample_tensor_v2 {
  DLDataType dtype; /* e.g. {kDLFloat, 32, 1}, {kDLInt, 64, 1}; lanes always 1 */
  uint32_t ndim;    /* 0 .. DPL_DATASET_MAX_SAMPLE_DIMS */
  int64_t shape[DPL_DATASET_MAX_SAMPLE_DIMS]; /* first ndim entries used, each >= 1 */
} dpl_sample_tensor_v2;

typedef struct dpl_dataset_info_v2 {
  uint32_t struct_size;        /* set by the host to sizeof(dpl_dataset_info_v2) before the call */
  uint32_t reserved;           /* 0 */
  dpl_sample_tensor_v2 input;  /* one sample's input, as `fill` writes it */
  dpl_sample_tensor_v2 target; /* one sample's target, as `fill` writes it */
  int64_t count;               /* samples in this split, >= 1 */
  /* Integer targets are in [0, num_classes) (for token data: the vocabulary, which integer
   * inputs are in too); checked when the data is opened. 0 for a float target. */
  int64_t num_classes;
} dpl_dataset_info_v2;

typedef struct dpl_dataset_plugin_v2 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_DATASET, abi_version 2 */

  /* As version 1. */
  dpl_status (*create)(const dpl_dataset_config_v2* config, dpl_dataset** out);
  void (*destroy)(dpl_dataset* dataset);
  /* Fills *info (the host sets info->struct_size first). Never blocks. */
  dpl_status (*describe)(dpl_dataset* dataset, dpl_dataset_info_v2* info);
  /* Writes sample indices[i] (0 <= indices[i] < count) of `epoch` to row i of `input` (dtype and
   * shape (n, input.shape...) of describe) and of `target` (likewise), for
   * i < n = input->shape[0] = target->shape[0]. Host memory (kDLCPU or kDLCUDAHost) owned by
   * the host, compact. Blocking; a failed read is DPL_ERR_IO naming the file and the sample. */
  dpl_status (*fill)(dpl_dataset* dataset, const int64_t* indices, int64_t epoch, DLTensor* input,
                     DLTensor* target);
  const char* (*last_error)(void);
} dpl_dataset_plugin_v2;

#ifdef __cplusplus
}
#endif

#endif /* DPL_DATASET_V2_H */
