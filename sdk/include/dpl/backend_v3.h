/*
 * dpl SDK, backend ABI version 3 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 2 (dpl/backend_v2.h) holds, with two changes, for a sharded optimizer
 * (ZeRO stage 1) and for hierarchical reduction (the workers of a machine reduce through shared
 * memory, and only each worker's slice crosses machines):
 *  - `reduce_scatter`: `input` holds world_size equal slices of `count` elements, back to back in
 *    rank order; every rank receives in `output` (count elements) the reduction with `op` of
 *    slice `rank` over all ranks. In place when `output` is exactly slice `rank` of `input` (the
 *    same memory); any other overlap is DPL_ERR_INVALID_ARGUMENT. The other slices of `input`
 *    are scratch afterwards (their content is unspecified).
 *  - `allgather` may run in place: when `input` is exactly slice `rank` of `output`, the call
 *    fills the other slices and leaves slice `rank` as it is. Any other overlap is
 *    DPL_ERR_INVALID_ARGUMENT.
 * Every rank passes the same count (the host pads to a multiple of world_size). Same stream and
 * timeout rules as allreduce (dpl/backend_v2.h). A slice's floating-point sum is computed in an
 * order that does not depend on which rank asks, so the ranks that allgather the slices
 * afterwards hold the same bits.
 *
 * The host adapts version-1 and version-2 plugins: reduce_scatter as an allreduce of the whole
 * buffer followed by a copy of the rank's slice, in-place allgather through a scratch copy of
 * the input.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v3 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v3);
 * with header.kind = DPL_PLUGIN_KIND_BACKEND and header.abi_version = 3.
 */
#ifndef DPL_BACKEND_V3_H
#define DPL_BACKEND_V3_H

#include "dpl/backend_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_BACKEND_ABI_VERSION_3 3u

/* The config of version 2, unchanged; the host writes DPL_BACKEND_ABI_VERSION_3 into
 * `version`. */
typedef dpl_backend_config_v2 dpl_backend_config_v3;

typedef struct dpl_backend_plugin_v3 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_BACKEND, abi_version 3 */

  /* --- The functions of version 2, in its order and with its contracts, except allgather's
   * in-place rule above. --- */
  dpl_status (*create)(const dpl_backend_config_v3* config, dpl_backend** out);
  void (*destroy)(dpl_backend* backend);
  dpl_status (*allreduce)(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream);
  dpl_status (*broadcast)(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream);
  dpl_status (*allgather)(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream);
  dpl_status (*barrier)(dpl_backend* backend);
  const char* (*last_error)(void);
  dpl_status (*synchronize)(dpl_backend* backend, void* stream);

  /* --- New in version 3. --- */
  /* See the top of this file. Blocking for host tensors; stream-ordered for device tensors. */
  dpl_status (*reduce_scatter)(dpl_backend* backend, DLTensor* input, DLTensor* output,
                               dpl_reduce_op op, void* stream);
} dpl_backend_plugin_v3;

#ifdef __cplusplus
}
#endif

#endif /* DPL_BACKEND_V3_H */
