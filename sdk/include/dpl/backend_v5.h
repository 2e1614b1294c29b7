/*
 * dpl SDK, backend ABI version 5 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 4 (dpl/backend_v4.h) holds, with one new function, so that a rank can
 * hand a buffer to one other rank without every rank receiving it (an allgather moves every
 * rank's block to every rank: the sharded optimizer's copy of each part needs each rank's part at
 * one rank only, a (world size - 1)-th of the bytes an allgather receives):
 *  - `send_receive(backend, send, to, receive, from, stream)` sends the bytes of `send` to rank
 *    `to` and receives the bytes rank `from` sends it into `receive`, both under way at once, so
 *    that ranks sending to each other in a cycle (rank r to r - k, from r + k) cannot deadlock.
 *    A rank that only receives passes `send` NULL and `to` -1; one that only sends passes
 *    `receive` NULL and `from` -1; one with nothing to move passes both (the call still keeps
 *    the order below). `to` and `from` are other ranks of the instance, never the caller.
 *  - It is ordered as a collective (version 1's rule): every rank of the instance calls it at the
 *    same place in its sequence of calls, whether or not it moves anything, so a backend may
 *    match the sends and receives of one call by that place. Across the ranks of one call, rank
 *    a's `to` is b exactly when rank b's `from` is a, and both tensors of such a pair hold the
 *    same number of bytes (their dtypes and shapes may differ; the bytes are copied as they are).
 *    A mismatch the backend can see is DPL_ERR_INVALID_ARGUMENT; one it cannot is undefined.
 *  - Tensors are contiguous and in the memory of the instance's device (host memory for a CPU
 *    backend), like a collective's; `stream` as for the collectives of version 2 (a device
 *    backend orders the call after the work on it; NULL for host memory). The call returns when
 *    `receive` holds the bytes (for a device backend: in stream order, as its collectives) and
 *    `send` may be written again.
 *  - abort (version 4) ends a send_receive under way as it ends a collective.
 * The host adapts version-1 to version-4 plugins: they have no send_receive; the host then moves
 * the bytes with a collective it has (an allgather, whose other blocks it drops), which is said
 * by the capability missing, never by an error.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v5 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v5);
 * with header.kind = DPL_PLUGIN_KIND_BACKEND and header.abi_version = 5. It may export its
 * version-4 table beside it, for launchers that predate version 5: a launcher takes the newest
 * table it knows.
 */
#ifndef DPL_BACKEND_V5_H
#define DPL_BACKEND_V5_H

#include "dpl/backend_v4.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_BACKEND_ABI_VERSION_5 5u

/* The config of version 4 (that is, of version 2), unchanged; the host writes
 * DPL_BACKEND_ABI_VERSION_5 into `version`. */
typedef dpl_backend_config_v4 dpl_backend_config_v5;

typedef struct dpl_backend_plugin_v5 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_BACKEND, abi_version 5 */

  /* --- The functions of version 4, in its order and with its contracts. --- */
  dpl_status (*create)(const dpl_backend_config_v5* config, dpl_backend** out);
  void (*destroy)(dpl_backend* backend);
  dpl_status (*allreduce)(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op, void* stream);
  dpl_status (*broadcast)(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream);
  dpl_status (*allgather)(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                          void* stream);
  dpl_status (*barrier)(dpl_backend* backend);
  const char* (*last_error)(void);
  dpl_status (*synchronize)(dpl_backend* backend, void* stream);
  dpl_status (*reduce_scatter)(dpl_backend* backend, DLTensor* input, DLTensor* output,
                               dpl_reduce_op op, void* stream);
  dpl_status (*abort)(dpl_backend* backend);

  /* --- New in version 5. --- */
  /* See the top of this file. `send` to rank `to` and `receive` from rank `from`, at once;
   * ordered as a collective. */
  dpl_status (*send_receive)(dpl_backend* backend, const DLTensor* send, int32_t to,
                             DLTensor* receive, int32_t from, void* stream);
} dpl_backend_plugin_v5;

#ifdef __cplusplus
}
#endif

#endif /* DPL_BACKEND_V5_H */
