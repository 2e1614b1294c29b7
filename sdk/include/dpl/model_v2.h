/*
 * dpl SDK, model ABI version 2 (frozen once released; see dpl/common.h for the rules).
 *
 * Version 2 lets a model live on a device the host cannot address, such as a CUDA GPU, while
 * the host keeps running the optimizer. Everything of version 1 (dpl/model_v1.h) holds, with
 * these changes:
 *  - train_step and eval_step also accept batches in host memory (kDLCPU or page-locked
 *    kDLCUDAHost) and copy them to the model's device themselves; `host_batch` hands out
 *    page-locked host buffers for that, so the copy is asynchronous (non-blocking) on a GPU.
 *  - `read_tensors` / `write_tensors` copy all parameter values or gradients between the model
 *    and host memory, so the host can average gradients and apply the optimizer to a host copy
 *    of the parameters (the way ZeRO-Offload runs a CPU optimizer for a GPU model).
 *  - Device models run all their device work, in order, on the device's default stream (the
 *    legacy NULL stream), and the gradient-ready callback fires once the work that produces that
 *    gradient is ISSUED there, not finished. The host passes stream NULL to the backend, so its
 *    collectives on device gradients are ordered after that work by the device itself.
 * The config, info and parameter structs are those of version 1, unchanged; the host writes
 * DPL_MODEL_ABI_VERSION_2 into their `version` fields where they have one.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v2 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v2);
 *     const dpl_model_plugin_v2 my_table = {...};
 * with header.kind = DPL_PLUGIN_KIND_MODEL and header.abi_version = 2. A host that knows
 * version 2 also loads version-1 plugins (CPU only).
 */
#ifndef DPL_MODEL_V2_H
#define DPL_MODEL_V2_H

#include "dpl/model_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_MODEL_ABI_VERSION_2 2u

typedef dpl_model_config_v1 dpl_model_config_v2;
typedef dpl_model_info_v1 dpl_model_info_v2;
typedef dpl_parameter_v1 dpl_parameter_v2;

/* Which per-parameter tensors read_tensors / write_tensors move. Values are fixed. */
typedef enum dpl_model_tensors {
  DPL_MODEL_TENSORS_VALUES = 0,   /* the parameters themselves */
  DPL_MODEL_TENSORS_GRADIENTS = 1 /* their gradients */
} dpl_model_tensors;

typedef struct dpl_model_plugin_v2 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_MODEL, abi_version 2 */

  /* --- The functions of version 1, in its order and with its contracts (dpl/model_v1.h),
   * except where a comment here says otherwise. --- */
  dpl_status (*create)(const dpl_model_config_v2* config, dpl_model** out);
  void (*destroy)(dpl_model* model);
  dpl_status (*describe)(dpl_model* model, dpl_model_info_v2* info);
  /* The tensors live on the model's device; for a CUDA model the host must not dereference them.
   * When the gradients are views into one buffer in parameter order, back to back (as the dpl
   * torch helper lays them out), the host reduces a bucket of them with ONE collective. */
  dpl_status (*parameter)(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter);
  dpl_status (*set_gradient_ready_callback)(dpl_model* model, dpl_gradient_ready_fn callback,
                                            void* user_context);
  dpl_status (*set_mode)(dpl_model* model, dpl_model_mode mode);
  dpl_status (*zero_gradients)(dpl_model* model);
  /* `input` and `labels` may live on the model's device or in host memory (kDLCPU,
   * kDLCUDAHost); host memory is copied to the device first. When the call returns, the host may
   * overwrite the batch. */
  dpl_status (*train_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           float* loss);
  /* Same batch rules as train_step. */
  dpl_status (*eval_step)(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                          double* loss_sum, int64_t* correct);
  dpl_status (*save_state)(dpl_model* model, const char* path);
  dpl_status (*load_state)(dpl_model* model, const char* path);
  const char* (*last_error)(void);

  /* --- New in version 2. --- */

  /* Fills *input (float32, shape (capacity, input_shape...)) and *labels (int64, shape
   * (capacity)) with host memory owned by the instance: page-locked (device type kDLCUDAHost) for
   * a CUDA model, so that train_step's copy to the device is asynchronous, plain kDLCPU memory
   * otherwise. The host fills the first n samples and passes the tensors to train_step or
   * eval_step with shape[0] set to n <= capacity. Valid until the next host_batch call or
   * destroy. capacity >= 1, else DPL_ERR_INVALID_ARGUMENT. The DLTensors' shape arrays are
   * owned by the instance too; the host copies a DLTensor before changing its shape. */
  dpl_status (*host_batch)(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* labels);

  /* Copies every parameter's value or gradient (`which`) into `host`: float32, parameters in
   * index order, back to back, `count` elements in all, which must equal the sum of the
   * parameters' elements (else DPL_ERR_INVALID_ARGUMENT, nothing copied). Blocking: returns when
   * the data is in `host`, after all device work issued before the call, including collectives
   * the host issued on the default stream. */
  dpl_status (*read_tensors)(dpl_model* model, dpl_model_tensors which, float* host,
                             uint64_t count);

  /* The reverse of read_tensors: overwrites every value or gradient from `host` (same layout
   * and count rule). Returns when `host` may be reused; later device work sees the new data. */
  dpl_status (*write_tensors)(dpl_model* model, dpl_model_tensors which, const float* host,
                              uint64_t count);
} dpl_model_plugin_v2;

#ifdef __cplusplus
}
#endif

#endif /* DPL_MODEL_V2_H */
