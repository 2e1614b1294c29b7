/*
 * dpl SDK, backend ABI version 1 (frozen once released; see dpl/common.h for the rules).
 *
 * A communication backend moves tensors between the `world_size` ranks of a job: allreduce,
 * broadcast, allgather and barrier. The host creates one backend instance per worker process,
 * after the rendezvous, and hands it the job's store for the backend's own connection setup.
 * Tensors cross as DLPack `DLTensor`s, in CPU memory (kDLCPU) or, for device backends, CUDA
 * memory (kDLCUDA); they must be dense and contiguous (strides NULL or row-major).
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v1);
 *     const dpl_backend_plugin_v1 my_table = {...};
 * (the symbol shares its name with its type; see DPL_PLUGIN_ENTRY_SYMBOL in dpl/common.h)
 * with header.kind = DPL_PLUGIN_KIND_BACKEND and header.abi_version = 1.
 *
 * Collectives are called by all ranks in the same order with matching shapes and dtypes.
 * A backend instance is used from one thread at a time (the host serialises calls), but
 * different instances may live on different threads.
 */
#ifndef DPL_BACKEND_V1_H
#define DPL_BACKEND_V1_H

#include <dlpack/dlpack.h>

#include "dpl/common.h"
#include "dpl/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_BACKEND_ABI_VERSION_1 1u

/* Reduction operators. Values are fixed. */
typedef enum dpl_reduce_op {
  DPL_REDUCE_SUM = 0,
  DPL_REDUCE_AVG = 1, /* sum divided by world_size; for integers, truncated toward zero */
  DPL_REDUCE_MIN = 2,
  DPL_REDUCE_MAX = 3
} dpl_reduce_op;

/* Everything a backend is created with. Grows only at the end. */
typedef struct dpl_backend_config_v1 {
  uint32_t struct_size;     /* sizeof(dpl_backend_config_v1) as the host compiled it */
  uint32_t version;         /* DPL_BACKEND_ABI_VERSION_1 */
  int32_t rank;             /* this process's global rank, 0 <= rank < world_size */
  int32_t world_size;       /* number of ranks in the job, >= 1 */
  int32_t local_rank;       /* rank among the workers of this machine */
  int32_t local_world_size; /* workers on this machine */
  int32_t device_type;      /* DLDeviceType the tensors will live on: kDLCPU or kDLCUDA */
  int32_t device_id;        /* device ordinal for kDLCUDA (the host passes local_rank); 0 for CPU */
  int64_t timeout_ms;       /* bound on every blocking call, setup included; > 0 */
  const dpl_store_v1* store; /* the job's store, valid until destroy returns; borrowed */
  dpl_log_fn log;            /* host logging; may be NULL (then the plugin stays silent) */
  void* log_context;         /* passed back to `log` */
  /* Backend-specific "key=value,key=value" options from --backend-options (e.g.
   * "interface=eth0" or "address=10.0.0.2"); never NULL, may be "". Unknown keys are an error. */
  const char* options;
} dpl_backend_config_v1;

/* Opaque instance owned by the plugin. */
typedef struct dpl_backend dpl_backend;

typedef struct dpl_backend_plugin_v1 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_BACKEND, abi_version 1 */

  /* Connects to all peers through config->store and returns a ready instance in *out.
   * Blocking, bounded by config->timeout_ms. Fails with DPL_ERR_NO_DEVICE when the device does
   * not exist, DPL_ERR_TIMEOUT when peers do not show up. The config is borrowed (the store
   * pointer must stay valid until destroy). */
  dpl_status (*create)(const dpl_backend_config_v1* config, dpl_backend** out);

  /* Releases the instance and its connections. Never fails; NULL is ignored. */
  void (*destroy)(dpl_backend* backend);

  /* In-place allreduce of `tensor` across all ranks with `op`. `stream` is a cudaStream_t for
   * CUDA tensors (NULL = default stream; the call may return before the device work is done, as
   * NCCL does) and must be NULL for CPU tensors (the call returns when the data is final).
   * Zero-element tensors are valid and return at once. DPL_ERR_UNSUPPORTED for a dtype/op the
   * backend does not implement; the tensor is then unchanged. */
  dpl_status (*allreduce)(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream);

  /* Copies `tensor` of rank `root` into `tensor` of every other rank. Same stream rules. */
  dpl_status (*broadcast)(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream);

  /* Gathers every rank's `input` (same shape and dtype everywhere) into `output`, which holds
   * world_size * numel(input) elements in rank order. `input` and `output` must not overlap. */
  dpl_status (*allgather)(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream);

  /* Returns when all ranks have entered the barrier. Blocking. */
  dpl_status (*barrier)(dpl_backend* backend);

  /* Message of the last failed call on this thread (any instance); "" if none. Static or
   * thread-local storage owned by the plugin; valid until the next call on this thread. */
  const char* (*last_error)(void);
} dpl_backend_plugin_v1;

#ifdef __cplusplus
}
#endif

#endif /* DPL_BACKEND_V1_H */
