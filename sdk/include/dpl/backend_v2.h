/*
 * dpl SDK, backend ABI version 2 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 1 (dpl/backend_v1.h) holds, with one change to the stream rule of
 * device collectives and one new function:
 *  - `stream` of allreduce, broadcast and allgather is the stream whose work produced the
 *    tensor (for a model: the stream its info names; NULL is the legacy default stream). A device
 *    backend orders the collective after the work issued on `stream` so far and may run it on a
 *    stream of its own (as PyTorch's NCCL process group does), so that later work on `stream`
 *    (the rest of backward) overlaps it. The result is visible to work on `stream` only after
 *    `synchronize`.
 *  - `synchronize(backend, stream)` blocks until every collective issued on this instance has
 *    finished and orders later work on `stream` after them, all within config->timeout_ms. When
 *    the time runs out, or a peer fails, the backend aborts its communicator (its later calls fail
 *    at once) and returns DPL_ERR_TIMEOUT or DPL_ERR_COMMUNICATION naming the collective and the
 *    rank. A host backend's collectives are complete when they return, so its synchronize returns
 *    DPL_OK at once.
 *  - The config grew one field at its end, `local_address`: where this machine can be reached by
 *    the others, so a backend binds and advertises an address that works across machines without
 *    options (binding to what the host name resolves to, often 127.0.0.1, does not).
 * The host adapts version-1 plugins (they get the v1 prefix of the config): their collectives are
 * complete in stream order when they return, so the host treats their missing synchronize as one
 * that returns at once.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v2 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v2);
 * with header.kind = DPL_PLUGIN_KIND_BACKEND and header.abi_version = 2.
 */
#ifndef DPL_BACKEND_V2_H
#define DPL_BACKEND_V2_H

#include "dpl/backend_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_BACKEND_ABI_VERSION_2 2u

typedef struct dpl_backend_config_v2 {
  /* --- The fields of dpl_backend_config_v1, in order and with its meanings. --- */
  uint32_t struct_size; /* sizeof(dpl_backend_config_v2) as the host compiled it */
  uint32_t version;     /* DPL_BACKEND_ABI_VERSION_2 */
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;
  int32_t local_world_size;
  int32_t device_type;
  int32_t device_id;
  int64_t timeout_ms;
  const dpl_store_v1* store;
  dpl_log_fn log;
  void* log_context;
  const char* options;
  /* --- New in version 2. --- */
  /* The IP address (text) of this machine's interface that routes to machine 0, where the store
   * is: the address peers on other machines reach this one at (127.0.0.1 in a one-machine job).
   * A backend binds and advertises it unless its options name an interface or an address. Never
   * NULL; "" when the host could not tell. */
  const char* local_address;
} dpl_backend_config_v2;

typedef struct dpl_backend_plugin_v2 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_BACKEND, abi_version 2 */

  /* --- The functions of version 1, in its order and with its contracts (dpl/backend_v1.h),
   * except for the stream rule above. --- */
  dpl_status (*create)(const dpl_backend_config_v2* config, dpl_backend** out);
  void (*destroy)(dpl_backend* backend);
  dpl_status (*allreduce)(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream);
  dpl_status (*broadcast)(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream);
  dpl_status (*allgather)(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream);
  dpl_status (*barrier)(dpl_backend* backend);
  const char* (*last_error)(void);

  /* --- New in version 2. --- */

  /* See the top of this file. Blocking, bounded by config->timeout_ms. */
  dpl_status (*synchronize)(dpl_backend* backend, void* stream);
} dpl_backend_plugin_v2;

#ifdef __cplusplus
}
#endif

#endif /* DPL_BACKEND_V2_H */
