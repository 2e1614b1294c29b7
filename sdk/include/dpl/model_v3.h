/*
 * dpl SDK, model ABI version 3 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 2 (dpl/model_v2.h) holds, with these changes:
 *  - The model is told the data it will see: one sample's shape and the number of classes come
 *    from the dataset (dpl/dataset.h), and a model that cannot take them fails create with
 *    DPL_ERR_INVALID_ARGUMENT naming both shapes. It is told its rank and the forward pass's
 *    precision (autocast).
 *  - Buffers: state that is not trained by gradients (BatchNorm's running mean and variance, its
 *    num_batches_tracked counter) is listed like the parameters, so the host can keep it
 *    identical on every rank (broadcast from rank 0 before each forward pass, as DDP does by
 *    default) and put it into checkpoints.
 *  - Random state: dropout and other random layers draw from generators whose state the host can
 *    read and restore, so a resumed run repeats a straight one bit for bit.
 *  - Two host batch slots, so the host can fill the next batch while the model works on the
 *    current one.
 *  - Device models compute on a stream they name in info; the host hands it to the backend, which
 *    orders its collectives after the work issued there and runs them on its own stream (backend
 *    ABI v2, dpl/backend_v2.h: `synchronize`).
 *  - save_state writes the trained model in the form Python reads back: for a model defined in
 *    Python (TorchScript), the scripted module (torch.jit.load gives it back); for a C++ model a
 *    state dict of the module's own names (torch.load gives {name: tensor}). load_state reads such
 *    a state dict (or the model's own save_state output) to start from it (--init-from), refusing
 *    a missing or misshapen tensor by name.
 *  - Loss scaling for fp16 (set_loss_scale): backward runs on the loss times a factor the host
 *    sets, so small gradients stay representable in float16; the host divides it out of the
 *    summed gradients (GradScaler's dynamic loss scaling).
 * Structs of v1/v2 grew at their end: a v3 config starts with the v1 config's fields (v1's
 * `reserved` is now `rank`), a v3 info with the v1 info's fields. The host adapts v1 and v2
 * plugins, which see only the prefix they know.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v3 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v3);
 * with header.kind = DPL_PLUGIN_KIND_MODEL and header.abi_version = 3.
 */
#ifndef DPL_MODEL_V3_H
#define DPL_MODEL_V3_H

#include "dpl/model_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_MODEL_ABI_VERSION_3 3u

/* How many host batch buffers host_batch_slot hands out (slots 0 .. DPL_MODEL_HOST_BATCH_SLOTS-1).
 */
#define DPL_MODEL_HOST_BATCH_SLOTS 2

/* The arithmetic of the forward pass. Master parameters, gradients as the host sees them and the
 * optimizer stay float32 in every case. Values are fixed. */
typedef enum dpl_precision {
  DPL_PRECISION_FP32 = 0, /* float32 throughout */
  DPL_PRECISION_BF16 = 1, /* autocast to bfloat16: convolutions and linear layers in bfloat16,
                             reductions and the loss in float32 */
  DPL_PRECISION_FP16 = 2  /* autocast to float16, as BF16; the host scales the loss
                             (set_loss_scale, with GradScaler's rules) */
} dpl_precision;

/* Flags of dpl_model_info_v3.flags. */
#define DPL_MODEL_BROADCAST_BUFFERS                         \
  1u /* the host broadcasts buffers from rank 0 before each \
        forward pass of training (the model option          \
        broadcast_buffers=0 clears it) */

typedef struct dpl_model_config_v3 {
  /* --- The fields of dpl_model_config_v1, in order. --- */
  uint32_t struct_size; /* sizeof(dpl_model_config_v3) as the host compiled it */
  uint32_t version;     /* DPL_MODEL_ABI_VERSION_3 */
  const char* options;  /* --model-options "key=value,..."; never NULL, may be "" */
  int32_t device_type;  /* kDLCPU or kDLCUDA */
  int32_t device_id;    /* CUDA ordinal; 0 for CPU */
  uint64_t seed;        /* seeds parameter initialisation and the random layers, alike on every
                           rank (as torch.manual_seed(seed) in every process of the recipe) */
  int32_t num_threads;  /* intra-op compute threads this process may use; >= 1 */
  int32_t rank;         /* this worker's global rank (v1's `reserved`), for messages and logs */
  dpl_log_fn log;       /* host logging; may be NULL */
  void* log_context;
  /* --- New in version 3. --- */
  uint32_t input_ndim; /* dims of ONE sample of the data, e.g. 3 for (channels, height, width);
                          0 when the host does not know (the model keeps its own) */
  uint32_t reserved;   /* 0 */
  int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS]; /* first input_ndim entries used */
  int64_t num_classes;                           /* labels are in [0, num_classes); 0 = unknown */
  int32_t precision;                             /* a dpl_precision */
  int32_t reserved2;                             /* 0 */
} dpl_model_config_v3;

typedef struct dpl_model_info_v3 {
  /* --- The fields of dpl_model_info_v1, in order. --- */
  uint32_t struct_size; /* set by the host to sizeof(dpl_model_info_v3) before the call */
  uint32_t input_ndim;
  int64_t input_shape[DPL_MODEL_MAX_INPUT_DIMS];
  int64_t num_classes;
  uint32_t parameter_count;
  uint32_t reserved; /* 0 */
  /* --- New in version 3. --- */
  uint32_t buffer_count; /* number of buffers (see `buffer`) */
  uint32_t flags;        /* DPL_MODEL_* flags */
  void* stream; /* the cudaStream_t the model computes on (NULL: the device's legacy default
                   stream, or a CPU model) */
} dpl_model_info_v3;

/* One buffer: model state that is not a parameter. */
typedef struct dpl_buffer_v3 {
  uint32_t struct_size; /* set by the host to sizeof(dpl_buffer_v3) before the call */
  uint32_t reserved;
  const char* name; /* e.g. "bn1.running_mean"; owned by the instance */
  DLTensor value;   /* any dtype, contiguous, on the model's device; data pointer fixed for the
                       life of the instance */
} dpl_buffer_v3;

typedef struct dpl_model_plugin_v3 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_MODEL, abi_version 3 */

  /* --- The functions of version 2, in its order and with its contracts (dpl/model_v2.h),
   * except where a comment here says otherwise. --- */
  /* Builds the network for the data of config (input_shape, num_classes when known). */
  dpl_status (*create)(const dpl_model_config_v3* config, dpl_model** out);
  void (*destroy)(dpl_model* model);
  /* Fills the v3 info (the host sets info->struct_size to sizeof(dpl_model_info_v3)). */
  dpl_status (*describe)(dpl_model* model, dpl_model_info_v3* info);
  dpl_status (*parameter)(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter);
  dpl_status (*set_gradient_ready_callback)(dpl_model* model, dpl_gradient_ready_fn callback,
                                            void* user_context);
  dpl_status (*set_mode)(dpl_model* model, dpl_model_mode mode);
  dpl_status (*zero_gradients)(dpl_model* model);
  dpl_status (*train_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           float* loss);
  dpl_status (*eval_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                          double* loss_sum, int64_t* correct);
  /* Writes the trained model to `path` in the form Python reads (see the top of this file):
   * atomically is the host's business (it passes a temporary path and renames). */
  dpl_status (*save_state)(dpl_model* model, const char* path);
  /* Reads a state dict (torch.save of {name: tensor}, or this model's save_state output) from
   * `path` into the parameters and buffers, copying into the existing tensors. Every parameter
   * and buffer must be present with its shape; the error names the first that is not. */
  dpl_status (*load_state)(dpl_model* model, const char* path);
  const char* (*last_error)(void);
  dpl_status (*host_batch)(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* labels);
  dpl_status (*read_tensors)(dpl_model* model, dpl_model_tensors which, float* host,
                             uint64_t count);
  dpl_status (*write_tensors)(dpl_model* model, dpl_model_tensors which, const float* host,
                              uint64_t count);

  /* --- New in version 3. --- */

  /* Fills *buffer for index in [0, buffer_count). Tensors stay valid and fixed until destroy. */
  dpl_status (*buffer)(dpl_model* model, uint32_t index, dpl_buffer_v3* buffer);

  /* Copies every buffer's bytes, in index order, back to back, into / from `host` (`bytes` in
   * all, which must equal the sum of the buffers' sizes, else DPL_ERR_INVALID_ARGUMENT and
   * nothing copied). Blocking, ordered after the model's device work. */
  dpl_status (*read_buffers)(dpl_model* model, void* host, uint64_t bytes);
  dpl_status (*write_buffers)(dpl_model* model, const void* host, uint64_t bytes);

  /* The state of every random generator the model draws from, as opaque bytes: writes at most
   * `capacity` bytes to `state` and the true size to *size (DPL_ERR_BUFFER_TOO_SMALL when it does
   * not fit; call again bigger). set_rng_state restores such bytes; other bytes are refused. */
  dpl_status (*rng_state)(dpl_model* model, void* state, uint64_t capacity, uint64_t* size);
  dpl_status (*set_rng_state)(dpl_model* model, const void* state, uint64_t size);

  /* host_batch for one of DPL_MODEL_HOST_BATCH_SLOTS independent buffers: filling one slot
   * leaves the other slot's memory (and a step running on it) untouched. Slot 0 is the buffer
   * host_batch hands out. Valid until the next call for the same slot, or destroy. */
  dpl_status (*host_batch_slot)(dpl_model* model, uint32_t slot, int64_t capacity, DLTensor* input,
                                DLTensor* labels);

  /* The factor train_step multiplies the loss by before backward: the gradients it accumulates
   * are then `scale` times the loss's, while *loss stays the unscaled loss. 1 after create. The
   * host sets it between steps (with precision fp16: the dynamic loss scale of GradScaler) and
   * takes the factor out of the summed gradients itself. `scale` must be positive and finite,
   * else DPL_ERR_INVALID_ARGUMENT and the factor is kept. */
  dpl_status (*set_loss_scale)(dpl_model* model, float scale);
} dpl_model_plugin_v3;

#ifdef __cplusplus
}
#endif

#endif /* DPL_MODEL_V3_H */
