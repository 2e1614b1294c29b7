/*
 * dpl SDK, model ABI version 4 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 3 (dpl/model_v3.h) holds, with these changes:
 *  - Typed samples (dataset ABI v2, dpl/dataset_v2.h): the model is told the dtype and shape of
 *    one sample's input and target. Image classification: float32 (C, H, W) input, int64 target
 *    of shape (). A language model: int64 (T) token ids in, int64 (T) next tokens as target.
 *    A model that cannot take them fails create with DPL_ERR_INVALID_ARGUMENT naming both.
 *  - train_step's `target` has the configured dtype and shape per sample; *loss is the MEAN over
 *    every target element of the batch (per sample for a class label, per position for tokens).
 *  - eval_step fills a dpl_eval_result_v4: the loss SUM over target elements, the number of
 *    target elements and the number predicted right (arg-max equals the target), so the host
 *    reports per-token loss, perplexity and accuracy for sequences, per-sample for classes.
 *  - host_batch_slot hands out batches of the configured dtypes and shapes.
 *  - The optimizer where the parameters are (optional, flag DPL_MODEL_DEVICE_OPTIMIZER): the
 *    host describes the optimizer once (set_optimizer) and each step (apply_update), and the
 *    model applies it to its own parameters on its own device and stream, from the averaged
 *    gradients, with its optimizer state on that device: no host copy of the parameters, no
 *    host round trip. The arithmetic is torch.optim's (torch 1.13, single-tensor path), element
 *    for element, so a CPU run of the same update and a device run agree to rounding.
 *    read_tensors / write_tensors move optimizer state too (checkpoints), by state index.
 * Structs of v3 grew at their end. The host adapts v1, v2 and v3 plugins: their input is float32
 * of input_shape, their target int64 of shape (), their eval result comes from v3's
 * (loss_sum, correct) with one element per sample.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v4 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v4);
 * with header.kind = DPL_PLUGIN_KIND_MODEL and header.abi_version = 4.
 */
#ifndef DPL_MODEL_V4_H
#define DPL_MODEL_V4_H

#include "dpl/dataset_v2.h"
#include "dpl/model_v3.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_MODEL_ABI_VERSION_4 4u

/* Flags of dpl_model_info_v4.flags, in addition to v3's. */
#define DPL_MODEL_DEVICE_OPTIMIZER \
  2u /* set_optimizer / apply_update run the optimizer on the model's device */
/* zero_gradients writes nothing: the next train_step's backward replaces the gradients instead
 * of adding to them (a gradient it does not reach becomes zero). In between, the gradients'
 * memory keeps its old values, so a host reads them only after a train_step. Said only to a host
 * that created the model with a dpl_model_config_v4. */
#define DPL_MODEL_REPLACED_GRADIENTS 4u

/* read_tensors / write_tensors: `which` = DPL_MODEL_TENSORS_OPTIMIZER_STATE + k moves state k
 * of the optimizer set by set_optimizer (the order of dpl_optimizer_kind's comment), float32,
 * for the elements of the shard the optimizer holds (see dpl_optimizer_config_v4), parameters
 * in index order, back to back. */
#define DPL_MODEL_TENSORS_OPTIMIZER_STATE 16

typedef struct dpl_model_config_v4 {
  /* --- The fields of dpl_model_config_v3, in order. --- */
  uint32_t struct_size; /* sizeof(dpl_model_config_v4) as the host compiled it */
  uint32_t version;     /* DPL_MODEL_ABI_VERSION_4 */
  const char* options;
  int32_t device_type;
  int32_t device_id;
  uint64_t seed;
  int32_t num_threads;
  int32_t rank;
  dpl_log_fn log;
  void* log_context;
  uint32_t input_ndim; /* = input.ndim below (kept for the v3 prefix) */
  uint32_t reserved;
  int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS]; /* = input.shape below */
  int64_t num_classes; /* integer targets (and token inputs) are in [0, num_classes); 0 = a
                          float target, or unknown */
  int32_t precision;
  int32_t reserved2;
  /* --- New in version 4. --- */
  dpl_sample_tensor_v2 input;  /* one sample's input; ndim 0 and dtype bits 0 = unknown (the
                                  model keeps its own) */
  dpl_sample_tensor_v2 target; /* one sample's target, likewise */
} dpl_model_config_v4;

typedef struct dpl_model_info_v4 {
  /* --- The fields of dpl_model_info_v3, in order. --- */
  uint32_t struct_size; /* set by the host to sizeof(dpl_model_info_v4) before the call */
  uint32_t input_ndim;
  int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS];
  int64_t num_classes;
  uint32_t parameter_count;
  uint32_t reserved;
  uint32_t buffer_count;
  uint32_t flags; /* DPL_MODEL_* flags */
  void* stream;
  /* --- New in version 4. --- */
  dpl_sample_tensor_v2 input;  /* what train_step takes per sample */
  dpl_sample_tensor_v2 target; /* likewise */
} dpl_model_info_v4;

/* What eval_step returns for a batch. */
typedef struct dpl_eval_result_v4 {
  uint32_t struct_size; /* set by the host to sizeof(dpl_eval_result_v4) before the call */
  uint32_t reserved;
  double loss_sum;  /* the loss summed over every target element of the batch */
  int64_t elements; /* target elements in the batch (samples x positions) */
  int64_t correct;  /* elements whose arg-max prediction equals the target; 0 for a float
                       target */
} dpl_eval_result_v4;

/* The optimizers a model may run on its device. Values are fixed. The state of each, in
 * state-index order (torch.optim's names): */
typedef enum dpl_optimizer_kind {
  DPL_OPTIMIZER_SGD = 0,     /* momentum_buffer (only with momentum > 0) */
  DPL_OPTIMIZER_ADAM = 1,    /* exp_avg, exp_avg_sq; weight decay is L2 (added to the gradient) */
  DPL_OPTIMIZER_ADAMW = 2,   /* exp_avg, exp_avg_sq; decoupled weight decay */
  DPL_OPTIMIZER_ADADELTA = 3 /* square_avg, acc_delta */
} dpl_optimizer_kind;

typedef struct dpl_optimizer_config_v4 {
  uint32_t struct_size; /* sizeof(dpl_optimizer_config_v4) as the host compiled it */
  int32_t kind;         /* a dpl_optimizer_kind */
  double momentum;      /* sgd */
  double beta1, beta2;  /* adam, adamw */
  double rho;           /* adadelta */
  double eps;
  /* Weight decay of parameter i, for i < parameter_count (parameter groups: 0 for biases and
   * norm weights under the default rule). Borrowed for the call. */
  const double* weight_decay;
  /* The elements this rank updates and keeps state for, as offsets into all parameters laid
   * back to back in index order: [shard_begin, shard_end). The whole model unless the host
   * shards the optimizer (ZeRO stage 1). */
  uint64_t shard_begin, shard_end;
} dpl_optimizer_config_v4;

/* One optimizer step. */
typedef struct dpl_update_v4 {
  uint32_t struct_size; /* sizeof(dpl_update_v4) as the host compiled it */
  uint32_t reserved;
  int64_t step;         /* 1 for the first step (bias correction) */
  double learning_rate; /* this step's (the schedule's) */
  /* The gradients as the model holds them, times this factor, are the ones to apply: the
   * averaging factor, fp16's unscale and the clipping coefficient multiplied together. */
  double gradient_factor;
} dpl_update_v4;

/* What gradient_statistics computes over all gradients. */
typedef struct dpl_gradient_statistics_v4 {
  uint32_t struct_size; /* set by the host before the call */
  uint32_t all_finite;  /* 1 when no gradient element is inf or NaN */
  double squared_norm;  /* sum of the squares of every gradient element (float64 accumulation),
                           of the gradients as held (before any factor) */
} dpl_gradient_statistics_v4;

typedef struct dpl_model_plugin_v4 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_MODEL, abi_version 4 */

  /* --- The functions of version 3, in its order and with its contracts (dpl/model_v3.h),
   * except where a comment here says otherwise. --- */
  dpl_status (*create)(const dpl_model_config_v4* config, dpl_model** out);
  void (*destroy)(dpl_model* model);
  dpl_status (*describe)(dpl_model* model, dpl_model_info_v4* info);
  dpl_status (*parameter)(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter);
  dpl_status (*set_gradient_ready_callback)(dpl_model* model, dpl_gradient_ready_fn callback,
                                            void* user_context);
  dpl_status (*set_mode)(dpl_model* model, dpl_model_mode mode);
  dpl_status (*zero_gradients)(dpl_model* model);
  /* Typed batch (see the top); *loss the mean over every target element. */
  dpl_status (*train_step)(dpl_model* model, const DLTensor* input, const DLTensor* target,
                           float* loss);
  /* Typed batch; fills *result (the host sets result->struct_size first). */
  dpl_status (*eval_step)(dpl_model* model, const DLTensor* input, const DLTensor* target,
                          dpl_eval_result_v4* result);
  dpl_status (*save_state)(dpl_model* model, const char* path);
  dpl_status (*load_state)(dpl_model* model, const char* path);
  const char* (*last_error)(void);
  dpl_status (*host_batch)(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* target);
  /* `which` may also be DPL_MODEL_TENSORS_OPTIMIZER_STATE + k (see above); count is then the
   * shard's elements. */
  dpl_status (*read_tensors)(dpl_model* model, dpl_model_tensors which, float* host,
                             uint64_t count);
  dpl_status (*write_tensors)(dpl_model* model, dpl_model_tensors which, const float* host,
                              uint64_t count);
  dpl_status (*buffer)(dpl_model* model, uint32_t index, dpl_buffer_v3* buffer);
  dpl_status (*read_buffers)(dpl_model* model, void* host, uint64_t bytes);
  dpl_status (*write_buffers)(dpl_model* model, const void* host, uint64_t bytes);
  dpl_status (*rng_state)(dpl_model* model, void* state, uint64_t capacity, uint64_t* size);
  dpl_status (*set_rng_state)(dpl_model* model, const void* state, uint64_t size);
  dpl_status (*host_batch_slot)(dpl_model* model, uint32_t slot, int64_t capacity, DLTensor* input,
                                DLTensor* target);
  dpl_status (*set_loss_scale)(dpl_model* model, float scale);

  /* --- New in version 4. --- */

  /* Only with DPL_MODEL_DEVICE_OPTIMIZER in info.flags; otherwise these three are NULL.
   * set_optimizer allocates the state for the shard (zeroed, as torch.optim's lazy state) and
   * replaces any earlier optimizer. DPL_ERR_UNSUPPORTED for a kind it does not run. */
  dpl_status (*set_optimizer)(dpl_model* model, const dpl_optimizer_config_v4* config);
  /* Computes *statistics over every gradient, ordered after the work on the model's stream;
   * blocks until the few bytes are on the host. */
  dpl_status (*gradient_statistics)(dpl_model* model, dpl_gradient_statistics_v4* statistics);
  /* Applies one step to the shard's elements on the model's stream (after the gradients'
   * collectives, which the host orders there). Does not zero the gradients. Returns when issued;
   * later work on the stream sees the new values. */
  dpl_status (*apply_update)(dpl_model* model, const dpl_update_v4* update);

  /* --- Added to version 4 later: read only where header.struct_size covers it. --- */

  /* NULL, or DPL_ERR_UNSUPPORTED, where the model cannot (a model on a device, a model whose
   * optimizer is set). From now on the parameters' values are the `count` floats at `values`
   * (read_tensors' layout: parameters in index order, back to back), which the host has filled; the
   * model computes with them there, keeps its gradients its own, and never frees them. The workers
   * of a machine pass the same shared memory, so a machine holds one copy of the parameters; the
   * host then updates each part of it once and orders those writes against every worker's reads. */
  dpl_status (*share_parameters)(dpl_model* model, float* values, uint64_t count);
  /* NULL, or DPL_ERR_UNSUPPORTED, where the model cannot (a model on a device, a model whose
   * optimizer is set). From now on the gradients are the `count` floats at `gradients` (the same
   * layout), which the model fills with its current ones, accumulates and replaces there, and
   * never frees. Each worker of a machine passes its own area of the shared memory; the others
   * read a gradient there only after the model reported it ready, and until the host's next
   * zero_gradients. */
  dpl_status (*share_gradients)(dpl_model* model, float* gradients, uint64_t count);
} dpl_model_plugin_v4;

/* The size of a v4 table from before share_parameters and share_gradients: the least a v4
 * plugin's may be. */
#define DPL_MODEL_PLUGIN_V4_FIRST_SIZE (sizeof(dpl_model_plugin_v4) - 2 * sizeof(void (*)(void)))

#ifdef __cplusplus
}
#endif

#endif /* DPL_MODEL_V4_H */
