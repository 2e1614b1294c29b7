/*
 * dpl SDK, dataset ABI version 1 (frozen once released; see dpl/common.h for the rules).
 *
 * A dataset plugin reads one data format (IDX, NumPy .npy, CIFAR-10, a folder of images, ...) and
 * serves samples by index: it opens one split (train or test) of the data at a path, says how
 * many samples there are, the shape of one sample and the number of classes, and fills a batch
 * for a list of indices into memory the host owns, ready for the model: float32 samples
 * (normalised as its options say) and int64 labels. The host keeps everything else: the sampler
 * (DistributedSampler semantics), batching and a prefetch thread that fills the next batch while
 * the current step runs.
 *
 * Random augmentation (random crops, flips) draws from a generator seeded by (config->seed,
 * epoch, sample index) only, so a sample gets the same augmentation whatever rank or world size
 * reads it, and a resumed run repeats a straight one.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_dataset_plugin_v1 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_dataset_plugin_v1);
 *     const dpl_dataset_plugin_v1 my_table = {...};
 * with header.kind = DPL_PLUGIN_KIND_DATASET and header.abi_version = 1.
 *
 * Threading: an instance is used from one host thread at a time, but not always the same one
 * (the prefetch thread fills, the worker's thread creates and describes). The plugin may use up
 * to config->num_threads threads of its own inside a call (image decoding).
 */
#ifndef DPL_DATASET_V1_H
#define DPL_DATASET_V1_H

#include <dlpack/dlpack.h>

#include "dpl/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_DATASET_ABI_VERSION_1 1u
#define DPL_DATASET_MAX_SAMPLE_DIMS 8

/* Which part of the data a dataset instance serves. Values are fixed. */
typedef enum dpl_dataset_split {
  DPL_DATASET_SPLIT_TRAIN = 0, /* the training set */
  DPL_DATASET_SPLIT_TEST = 1   /* the test (evaluation) set */
} dpl_dataset_split;

typedef struct dpl_dataset_config_v1 {
  uint32_t struct_size; /* sizeof(dpl_dataset_config_v1) as the host compiled it */
  uint32_t version;     /* DPL_DATASET_ABI_VERSION_1 */
  const char* path;     /* --data-dir: the folder (or file) holding the data; never NULL */
  /* --data-options "key=value,..." (e.g. "mean=0.5,std=0.25" or "crop=4,flip=horizontal");
   * never NULL, may be "". Unknown keys are an error naming the key and the known ones. */
  const char* options;
  int32_t split;       /* a dpl_dataset_split */
  int32_t num_threads; /* threads the plugin may use inside a call; >= 1 */
  /* A folder the plugin may keep derived copies in (inflated or decoded data), keyed so that a
   * changed source is never served from it; "" = none. Never NULL. */
  const char* cache_dir;
  uint64_t seed;  /* seeds random augmentation together with the epoch and the sample index */
  dpl_log_fn log; /* host logging; may be NULL */
  void* log_context;
} dpl_dataset_config_v1;

typedef struct dpl_dataset_info_v1 {
  uint32_t struct_size; /* set by the host to sizeof(dpl_dataset_info_v1) before the call */
  uint32_t sample_ndim; /* dims of ONE sample as `fill` writes it, e.g. 3 for (1, 28, 28) */
  int64_t sample_shape[DPL_DATASET_MAX_SAMPLE_DIMS]; /* first sample_ndim entries used */
  int64_t count;                                     /* samples in this split, >= 1 */
  int64_t num_classes; /* every label is in [0, num_classes); checked when the data is opened */
} dpl_dataset_info_v1;

/* Opaque instance owned by the plugin. */
typedef struct dpl_dataset dpl_dataset;

typedef struct dpl_dataset_plugin_v1 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_DATASET, abi_version 1 */

  /* Opens the split and checks ALL of it that can be checked without decoding every sample
   * twice (headers, sizes, counts, label ranges; images are checked when they are decoded, which
   * a plugin may do here). Every refusal names the file and the problem: DPL_ERR_NOT_FOUND for
   * missing files, DPL_ERR_INVALID_ARGUMENT for bad content or options, DPL_ERR_IO for a read
   * that failed. Blocking. */
  dpl_status (*create)(const dpl_dataset_config_v1* config, dpl_dataset** out);

  /* Frees the instance. NULL is ignored. */
  void (*destroy)(dpl_dataset* dataset);

  /* Fills *info (the host sets info->struct_size first). Never blocks. */
  dpl_status (*describe)(dpl_dataset* dataset, dpl_dataset_info_v1* info);

  /* Writes sample indices[i] (0 <= indices[i] < count) of `epoch` to row i of `input` (float32,
   * shape (n, sample_shape...), host memory) and its label to labels[i] (int64, shape (n)), for
   * i < n = input->shape[0] = labels->shape[0]. Both tensors are host memory (kDLCPU or
   * kDLCUDAHost) owned by the host and compact. Blocking; a failed read (a file that changed or
   * vanished under the run) is DPL_ERR_IO naming the file and the sample. */
  dpl_status (*fill)(dpl_dataset* dataset, const int64_t* indices, int64_t epoch, DLTensor* input,
                     DLTensor* labels);

  /* Message of the last failed call on this thread; "" if none. Owned by the plugin. */
  const char* (*last_error)(void);
} dpl_dataset_plugin_v1;

#ifdef __cplusplus
}
#endif

#endif /* DPL_DATASET_V1_H */
