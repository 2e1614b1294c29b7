/*
 * dpl SDK, model ABI version 1 (frozen once released; see dpl/common.h for the rules).
 *
 * A model plugin owns a network, its parameters and their gradients, and knows how to run a
 * training step (forward, loss, backward) and an evaluation step on a batch. It knows nothing of
 * ranks or communication: the host averages the gradients it exposes through a backend and runs
 * the optimizer on the parameter tensors it exposes. Parameters and gradients cross as DLPack
 * `DLTensor`s that stay valid (same data pointer) for the life of the instance, so the host can
 * update them in place.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v1 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1);
 *     const dpl_model_plugin_v1 my_table = {...};
 * (the symbol shares its name with its type; see DPL_PLUGIN_ENTRY_SYMBOL in dpl/common.h)
 * with header.kind = DPL_PLUGIN_KIND_MODEL and header.abi_version = 1.
 *
 * Threading: an instance is used from one host thread at a time, except the grad-ready callback,
 * which the plugin may invoke from its own (autograd) threads during train_step.
 */
#ifndef DPL_MODEL_V1_H
#define DPL_MODEL_V1_H

#include <dlpack/dlpack.h>

#include "dpl/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_MODEL_ABI_VERSION_1 1u
#define DPL_MODEL_MAX_INPUT_DIMS 8

typedef struct dpl_model_config_v1 {
  uint32_t struct_size; /* sizeof(dpl_model_config_v1) as the host compiled it */
  uint32_t version;     /* DPL_MODEL_ABI_VERSION_1 */
  /* Model-specific "key=value,key=value" options from --model-options (e.g. "dropout=0");
   * never NULL, may be "". Unknown keys are an error naming the key and the known ones. */
  const char* options;
  int32_t device_type; /* kDLCPU or kDLCUDA: where parameters, gradients and batches live */
  int32_t device_id;   /* CUDA ordinal; 0 for CPU */
  uint64_t seed;       /* seeds parameter initialisation and dropout */
  int32_t num_threads; /* intra-op compute threads this process may use; >= 1 */
  int32_t reserved;    /* 0 */
  dpl_log_fn log;      /* host logging; may be NULL */
  void* log_context;
} dpl_model_config_v1;

/* What the host needs to feed the model. */
typedef struct dpl_model_info_v1 {
  uint32_t struct_size; /* set by the host to sizeof(dpl_model_info_v1) before the call */
  uint32_t input_ndim;  /* dims of ONE sample, e.g. 3 for (channels, height, width) */
  int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS]; /* first input_ndim entries used */
  int64_t num_classes;                           /* labels are int64 in [0, num_classes) */
  uint32_t parameter_count;                      /* number of parameter tensors (not elements) */
  uint32_t reserved;                             /* 0 */
} dpl_model_info_v1;

typedef struct dpl_parameter_v1 {
  uint32_t struct_size; /* set by the host to sizeof(dpl_parameter_v1) before the call */
  uint32_t reserved;
  const char* name;  /* e.g. "fc1.weight"; owned by the instance */
  DLTensor value;    /* the parameter itself; float32, contiguous; host may write in place */
  DLTensor gradient; /* its gradient, same shape; written by train_step, read by the host */
} dpl_parameter_v1;

/* Called once per parameter per train_step as soon as that parameter's gradient is final for the
 * step (in reverse order of use, as autograd produces them), so the host can start
 * communicating while backward continues. May run on a plugin thread; must not call back into
 * the model. `parameter_index` indexes the parameter list. */
typedef void (*dpl_gradient_ready_fn)(void* user_context, uint32_t parameter_index);

typedef enum dpl_model_mode {
  DPL_MODEL_MODE_TRAIN = 0, /* dropout active */
  DPL_MODEL_MODE_EVAL = 1   /* dropout off */
} dpl_model_mode;

typedef struct dpl_model dpl_model;

typedef struct dpl_model_plugin_v1 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_MODEL, abi_version 1 */

  /* Builds the network on the configured device with parameters initialised from seed.
   * DPL_ERR_INVALID_ARGUMENT for bad options, DPL_ERR_NO_DEVICE for a missing device. */
  dpl_status (*create)(const dpl_model_config_v1* config, dpl_model** out);

  /* Frees the instance; every tensor it handed out becomes invalid. NULL is ignored. */
  void (*destroy)(dpl_model* model);

  /* Fills *info (the host sets info->struct_size first). Never blocks. */
  dpl_status (*describe)(dpl_model* model, dpl_model_info_v1* info);

  /* Fills *parameter for index in [0, parameter_count). The tensors' data pointers and shapes
   * stay valid and fixed until destroy. */
  dpl_status (*parameter)(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter);

  /* Registers (callback non-NULL) or removes (NULL) the gradient-ready callback. */
  dpl_status (*set_gradient_ready_callback)(dpl_model* model, dpl_gradient_ready_fn callback,
                                            void* user_context);

  /* Selects dropout behaviour for later train_steps. */
  dpl_status (*set_mode)(dpl_model* model, dpl_model_mode mode);

  /* Sets every gradient to zero in place. */
  dpl_status (*zero_gradients)(dpl_model* model);

  /* Forward on `input` (float32, shape (batch, input_shape...)), mean loss against `labels`
   * (int64, shape (batch)), backward: gradients are ADDED to the gradient tensors (the host
   * zeroes them between optimizer steps, so it can accumulate). Writes the loss to *loss.
   * Blocking. Both tensors are borrowed and live on the model's device. */
  dpl_status (*train_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           float* loss);

  /* Forward without gradients in eval mode: *loss_sum receives the summed (not mean) loss over
   * the batch and *correct the number of samples whose arg-max class equals the label. */
  dpl_status (*eval_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                          double* loss_sum, int64_t* correct);

  /* Writes / reads the model's own state (parameters and any buffers) to / from a file at `path`
   * (created or replaced). Optimizer state is the host's business. Blocking. */
  dpl_status (*save_state)(dpl_model* model, const char* path);
  dpl_status (*load_state)(dpl_model* model, const char* path);

  /* Message of the last failed call on this thread; "" if none. Owned by the plugin. */
  const char* (*last_error)(void);
} dpl_model_plugin_v1;

#ifdef __cplusplus
}
#endif

#endif /* DPL_MODEL_V1_H */
