/*
 * dpl SDK: the key/value store the host hands to a backend for its own rendezvous
 * (exchanging addresses, NCCL unique ids, ...). The host serves it over TCP from the launcher
 * of machine 0, so it outlives any one worker. Keys are namespaced by the host per job and
 * backend instance; a backend only sees its own keys.
 *
 * Thread-safety: all functions may be called from any thread, concurrently.
 */
#ifndef DPL_STORE_H
#define DPL_STORE_H

#include "dpl/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPL_STORE_VERSION 1u

typedef struct dpl_store_v1 {
  uint32_t struct_size; /* sizeof(dpl_store_v1) */
  uint32_t version;     /* DPL_STORE_VERSION */
  void* context;        /* opaque; passed back as the first argument of every call */

  /* Stores `value_size` bytes under `key`, replacing any value. Blocking (one round trip).
   * `value` is borrowed; it may be NULL when value_size is 0. */
  dpl_status (*set)(void* context, const char* key, const void* value, uint64_t value_size);

  /* Waits until `key` exists (at most timeout_ms milliseconds; 0 means do not wait), then copies
   * its value into `buffer` (capacity bytes, caller-owned). `*value_size` always receives the
   * value's true size; DPL_ERR_BUFFER_TOO_SMALL when it exceeds capacity (call again bigger).
   * DPL_ERR_TIMEOUT when the key did not appear in time. Blocking. */
  dpl_status (*get)(void* context, const char* key, void* buffer, uint64_t capacity,
                    uint64_t* value_size, int64_t timeout_ms);

  /* Waits until every key of `keys` (key_count of them) exists, at most timeout_ms milliseconds.
   * DPL_ERR_TIMEOUT names the missing keys in last_error. Blocking. */
  dpl_status (*wait)(void* context, const char* const* keys, uint32_t key_count,
                     int64_t timeout_ms);

  /* Atomically adds `delta` to the signed 64-bit counter under `key` (created as 0) and writes
   * the new value to `*result`. Blocking (one round trip). */
  dpl_status (*add)(void* context, const char* key, int64_t delta, int64_t* result);

  /* Message of the last failed call on this thread; valid until the next call on this thread. */
  const char* (*last_error)(void* context);
} dpl_store_v1;

typedef dpl_store_v1 dpl_store;

#ifdef __cplusplus
}
#endif

#endif /* DPL_STORE_H */
