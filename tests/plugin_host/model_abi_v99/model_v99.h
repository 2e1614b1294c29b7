/*
 * A model ABI "version 99" that exists only in the tests: what a future model ABI might change,
 * to show that a new version needs an adapter and nothing else of the host (model_v99_test.cpp).
 * Against dpl/model.h it moves and reshapes entries:
 *  - the config carries the data's sample shape and classes in an order of its own, and no
 *    device (a CPU model);
 *  - the info lists the classes before the sample shape;
 *  - one `step` serves training and evaluation: the mode comes with each call (no set_mode) and
 *    the loss comes back per sample;
 *  - the random state is one uint64_t.
 * Everything not said here is as in dpl/model_v3.h.
 */
#ifndef DPL_TEST_MODEL_V99_H
#define DPL_TEST_MODEL_V99_H

#include "dpl/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_MODEL_ABI_VERSION_99 99u

typedef struct dpl_model_config_v99 {
  uint32_t struct_size; /* sizeof(dpl_model_config_v99) */
  uint32_t version;     /* DPL_MODEL_ABI_VERSION_99 */
  uint64_t seed;
  const char* options; /* never NULL */
  int32_t num_threads;
  int32_t rank;
  uint32_t sample_ndim; /* the data's sample shape: required, >= 1 */
  uint32_t reserved;
  int64_t sample_shape[DPL_MODEL_MAX_INPUT_DIMS];
  int64_t num_classes; /* required, >= 2 */
  dpl_log_fn log;
  void* log_context;
} dpl_model_config_v99;

typedef struct dpl_model_info_v99 {
  uint32_t struct_size; /* set by the host */
  uint32_t parameter_count;
  int64_t num_classes;
  uint32_t sample_ndim;
  uint32_t reserved;
  int64_t sample_shape[DPL_MODEL_MAX_INPUT_DIMS];
} dpl_model_info_v99;

typedef struct dpl_model_plugin_v99 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_MODEL, abi_version 99 */
  const char* (*last_error)(void);
  dpl_status (*create)(const dpl_model_config_v99* config, dpl_model** out);
  void (*destroy)(dpl_model* model);
  dpl_status (*describe)(dpl_model* model, dpl_model_info_v99* info);
  dpl_status (*parameter)(dpl_model* model, uint32_t index, dpl_parameter_v2* parameter);
  dpl_status (*set_gradient_ready_callback)(dpl_model* model, dpl_gradient_ready_fn callback,
                                            void* user_context);
  dpl_status (*zero_gradients)(dpl_model* model);
  /* Forward on the batch; `losses` receives each sample's loss (input->shape[0] floats) and
   * *correct the samples whose arg-max class is the label. In DPL_MODEL_MODE_TRAIN also backward
   * of the mean loss, the gradients ADDED. */
  dpl_status (*step)(dpl_model* model, dpl_model_mode mode, const DLTensor* input,
                     const DLTensor* labels, float* losses, int64_t* correct);
  dpl_status (*save_state)(dpl_model* model, const char* path);
  dpl_status (*load_state)(dpl_model* model, const char* path);
  dpl_status (*random_state)(dpl_model* model, uint64_t* state);
  dpl_status (*set_random_state)(dpl_model* model, uint64_t state);
} dpl_model_plugin_v99;

#ifdef __cplusplus
}
#endif

#endif /* DPL_TEST_MODEL_V99_H */
