/*
 * loopback: a minimal, real dpl backend for a job of world size 1. With one rank every
 * collective is the identity (allreduce, broadcast) or a copy (allgather), so this plugin shows
 * the whole backend ABI without any networking. Use it as the skeleton of a real backend.
 */
#include <stdio.h>
#include <string.h>

#include "dpl/backend.h"

struct dpl_backend {
  int32_t rank;
  dpl_log_fn log;
  void* log_context;
};

/* The message of the last failure. One job uses one instance from one thread, so a static buffer
 * is enough here; a real backend should use thread-local storage. */
static char g_last_error[256];

static dpl_status Fail(dpl_status status, const char* message) {
  snprintf(g_last_error, sizeof g_last_error, "%s", message);
  return status;
}

static const char* LastError(void) {
  return g_last_error;
}

static dpl_status Create(const dpl_backend_config_v2* config, dpl_backend** out) {
  static struct dpl_backend instance;
  char message[128];
  if (config == NULL || out == NULL)
    return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback: NULL argument");
  if (config->world_size != 1) {
    snprintf(message, sizeof message,
             "loopback backend works only for world size 1 (got %d); use gloo or tcp",
             (int)config->world_size);
    return Fail(DPL_ERR_INVALID_ARGUMENT, message);
  }
  if (config->device_type != kDLCPU) {
    return Fail(DPL_ERR_UNSUPPORTED, "loopback backend supports only CPU tensors");
  }
  if (config->options != NULL && config->options[0] != '\0') {
    snprintf(message, sizeof message, "loopback backend has no options (got \"%.60s\")",
             config->options);
    return Fail(DPL_ERR_INVALID_ARGUMENT, message);
  }
  instance.rank = config->rank;
  instance.log = config->log;
  instance.log_context = config->log_context;
  if (instance.log != NULL)
    instance.log(instance.log_context, DPL_LOG_INFO, "loopback backend ready");
  *out = &instance;
  return DPL_OK;
}

static void Destroy(dpl_backend* backend) {
  (void)backend;
}

static int IsCpu(const DLTensor* tensor) {
  return tensor->device.device_type == kDLCPU;
}

static uint64_t ByteSize(const DLTensor* tensor) {
  uint64_t elements = 1;
  int32_t i;
  for (i = 0; i < tensor->ndim; ++i) elements *= (uint64_t)tensor->shape[i];
  return elements * tensor->dtype.lanes * ((tensor->dtype.bits + 7u) / 8u);
}

/* With one rank, sum, avg, min and max of a tensor are the tensor itself. */
static dpl_status Allreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op,
                            void* stream) {
  (void)backend;
  if (tensor == NULL || !IsCpu(tensor) || stream != NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback allreduce needs a CPU tensor and no stream");
  }
  if (op < DPL_REDUCE_SUM || op > DPL_REDUCE_MAX) {
    return Fail(DPL_ERR_UNSUPPORTED, "loopback allreduce: unknown reduce op");
  }
  return DPL_OK;
}

static dpl_status Broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream) {
  (void)backend;
  if (tensor == NULL || !IsCpu(tensor) || stream != NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback broadcast needs a CPU tensor and no stream");
  }
  if (root != 0) return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback broadcast: root must be 0");
  return DPL_OK;
}

static dpl_status Allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                            void* stream) {
  uint64_t bytes;
  (void)backend;
  if (input == NULL || output == NULL || !IsCpu(input) || !IsCpu(output) || stream != NULL) {
    return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback allgather needs CPU tensors and no stream");
  }
  bytes = ByteSize(input);
  if (ByteSize(output) != bytes) {
    return Fail(DPL_ERR_INVALID_ARGUMENT,
                "loopback allgather: output must hold world_size (1) x the input's elements");
  }
  if (bytes > 0) {
    memcpy((char*)output->data + output->byte_offset, (const char*)input->data + input->byte_offset,
           (size_t)bytes);
  }
  return DPL_OK;
}

static dpl_status Barrier(dpl_backend* backend) {
  (void)backend;
  return DPL_OK;
}

/* A host backend's collectives are complete when they return: nothing to wait for. */
static dpl_status Synchronize(dpl_backend* backend, void* stream) {
  (void)backend;
  if (stream != NULL) return Fail(DPL_ERR_INVALID_ARGUMENT, "loopback synchronize: no stream");
  return DPL_OK;
}

/* The one exported symbol. Its name is also the name of its type, so the table is declared
 * under another C name and DPL_PLUGIN_ENTRY_SYMBOL gives it the entry symbol's name. */
DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v2 loopback_plugin
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_backend_plugin_v2);
const dpl_backend_plugin_v2 loopback_plugin = {
    {(uint32_t)sizeof(dpl_backend_plugin_v2), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND,
     DPL_BACKEND_ABI_VERSION_2, "loopback", "1.0.0",
     "world size 1 only: every collective is local (the out-of-tree plugin template)"},
    Create,
    Destroy,
    Allreduce,
    Broadcast,
    Allgather,
    Barrier,
    LastError,
    Synchronize};
