/*
 * dpl SDK, backend ABI version 4 (frozen once released; see dpl/common.h for the rules).
 *
 * Everything of version 3 (dpl/backend_v3.h) holds, with one new function, so that a worker
 * whose peer died or hangs (SIGSTOP, a lost machine) survives the collective it is blocked in
 * and builds a new communicator with the ranks left, instead of waiting out the timeout:
 *  - `abort(backend)` is the one exception to version 1's rule that an instance is used from one
 *    thread at a time: it may be called from any thread, at any time between create's return and
 *    the start of destroy, while one collective, synchronize or barrier of the instance runs on
 *    another thread (or none does). It makes that call return within a second, and every later
 *    call of the instance (allreduce, broadcast, allgather, reduce_scatter, barrier,
 *    synchronize) fail at once, with DPL_ERR_COMMUNICATION and a last_error that says the
 *    instance was aborted. A call that abort interrupts leaves its output unspecified.
 *  - abort never waits for a peer, returns DPL_OK (DPL_ERR_INVALID_ARGUMENT for a NULL
 *    backend only), and may be called again: a second call changes nothing.
 *  - After abort, destroy returns promptly too, without waiting for any peer (no last barrier,
 *    no flush). The instance cannot be used again: the ranks no longer agree on the sequence of
 *    collectives. The host makes a new instance, with a new store prefix, for the ranks left.
 *  - The peers of an aborted instance see it as a rank that went away (their calls fail with
 *    DPL_ERR_COMMUNICATION, or run into their timeout); the host aborts their instances too.
 * The host adapts version-1 to version-3 plugins: they have no abort, so a collective blocked
 * in one returns only when the plugin gives up (config->timeout_ms); the host then asks for no
 * abort (the capability is missing) and only stops waiting for the call.
 *
 * A plugin exports exactly one symbol for this version:
 *     DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v4 my_table
 *         DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v4);
 * with header.kind = DPL_PLUGIN_KIND_BACKEND and header.abi_version = 4.
 */
#ifndef DPL_BACKEND_V4_H
#define DPL_BACKEND_V4_H

#include "dpl/backend_v3.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_BACKEND_ABI_VERSION_4 4u

/* The config of version 3 (that is, of version 2), unchanged; the host writes
 * DPL_BACKEND_ABI_VERSION_4 into `version`. */
typedef dpl_backend_config_v3 dpl_backend_config_v4;

typedef struct dpl_backend_plugin_v4 {
  dpl_plugin_header header; /* kind DPL_PLUGIN_KIND_BACKEND, abi_version 4 */

  /* --- The functions of version 3, in its order and with its contracts. --- */
  dpl_status (*create)(const dpl_backend_config_v4* config, dpl_backend** out);
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

  /* --- New in version 4. --- */
  /* See the top of this file. From any thread, concurrently with one call of the instance;
   * never blocks on a peer; idempotent. */
  dpl_status (*abort)(dpl_backend* backend);
} dpl_backend_plugin_v4;

#ifdef __cplusplus
}
#endif

#endif /* DPL_BACKEND_V4_H */
