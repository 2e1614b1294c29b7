/* A backend plugin for the tests that reads the environment as a plugin written for torchrun
 * would: `create` writes RANK, LOCAL_RANK, WORLD_SIZE, ... (getenv) with the rank the launcher
 * gave it into <dir>/rank-<rank>.env (--backend-options dir=<dir>), waits until every rank has
 * written its file, and then fails, which ends the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpl/backend.h"

static const char* const kNames[] = {"RANK",
                                     "LOCAL_RANK",
                                     "ROLE_RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_WORLD_SIZE",
                                     "GROUP_RANK",
                                     "GROUP_WORLD_SIZE",
                                     "ROLE_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "TORCHELASTIC_RESTART_COUNT",
                                     "DPL_TEST_GIVEN"};

static const char* g_error = "";

static dpl_status Fail(const char* message, dpl_status status) {
  g_error = message;
  return status;
}

static dpl_status Create(const dpl_backend_config_v1* config, dpl_backend** out) {
  const char* dir = strstr(config->options, "dir=");
  char path[4096];
  char key[64];
  char keys[256][64];
  const char* key_list[256];
  int rank;
  size_t i;
  FILE* file;
  (void)out;
  if (dir == NULL || config->world_size > 256) {
    return Fail("envprobe: needs --backend-options dir=DIR", DPL_ERR_INVALID_ARGUMENT);
  }
  snprintf(path, sizeof path, "%s/rank-%d.env", dir + 4, (int)config->rank);
  file = fopen(path, "w");
  if (file == NULL) return Fail("envprobe: cannot write its file", DPL_ERR_IO);
  fprintf(file, "config_rank=%d\n", (int)config->rank);
  for (i = 0; i < sizeof kNames / sizeof kNames[0]; ++i) {
    const char* value = getenv(kNames[i]);
    fprintf(file, "%s=%s\n", kNames[i], value ? value : "(unset)");
  }
  fclose(file);
  snprintf(key, sizeof key, "envprobe/%d", (int)config->rank);
  if (config->store->set(config->store->context, key, "", 0) != DPL_OK) {
    return Fail("envprobe: store set failed", DPL_ERR_COMMUNICATION);
  }
  for (rank = 0; rank < config->world_size; ++rank) {
    snprintf(keys[rank], sizeof keys[rank], "envprobe/%d", rank);
    key_list[rank] = keys[rank];
  }
  config->store->wait(config->store->context, key_list, (uint32_t)config->world_size,
                      config->timeout_ms);
  return Fail("envprobe: wrote its environment", DPL_ERR_UNSUPPORTED);
}

static void Destroy(dpl_backend* backend) {
  (void)backend;
}
static dpl_status Allreduce(dpl_backend* b, DLTensor* t, dpl_reduce_op op, void* s) {
  (void)b, (void)t, (void)op, (void)s;
  return Fail("envprobe: no collectives", DPL_ERR_UNSUPPORTED);
}
static dpl_status Broadcast(dpl_backend* b, DLTensor* t, int32_t root, void* s) {
  (void)b, (void)t, (void)root, (void)s;
  return Fail("envprobe: no collectives", DPL_ERR_UNSUPPORTED);
}
static dpl_status Allgather(dpl_backend* b, const DLTensor* in, DLTensor* o, void* s) {
  (void)b, (void)in, (void)o, (void)s;
  return Fail("envprobe: no collectives", DPL_ERR_UNSUPPORTED);
}
static dpl_status Barrier(dpl_backend* b) {
  (void)b;
  return Fail("envprobe: no collectives", DPL_ERR_UNSUPPORTED);
}
static const char* LastError(void) {
  return g_error;
}

DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 envprobe_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v1);
const dpl_backend_plugin_v1 envprobe_plugin = {
    {sizeof(dpl_backend_plugin_v1), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_1, "envprobe", "0.0.1",
     "writes what a plugin reads of its environment"},
    Create,
    Destroy,
    Allreduce,
    Broadcast,
    Allgather,
    Barrier,
    LastError};
