/* Deliberately good and deliberately broken plugins for the plugin host tests. One source, built
 * several times with a different TEST_PLUGIN_* definition each (see ../CMakeLists.txt). */
#include <stddef.h>

/* Each variant uses only some of the helpers below. */
#pragma GCC diagnostic ignored "-Wunused-function"

#include "dpl/backend.h"
#include "dpl/model.h"

static const char* g_last_error = "";

static const char* LastError(void) {
  return g_last_error;
}

static dpl_status BackendCreate(const dpl_backend_config_v1* config, dpl_backend** out) {
  (void)config;
  *out = NULL;
  g_last_error = "test backend cannot reach its peers on purpose";
  return DPL_ERR_COMMUNICATION;
}
static void BackendDestroy(dpl_backend* backend) {
  (void)backend;
}
static dpl_status Allreduce(dpl_backend* backend, DLTensor* tensor, dpl_reduce_op op,
                            void* stream) {
  (void)backend, (void)tensor, (void)op, (void)stream;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status Broadcast(dpl_backend* backend, DLTensor* tensor, int32_t root, void* stream) {
  (void)backend, (void)tensor, (void)root, (void)stream;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status Allgather(dpl_backend* backend, const DLTensor* input, DLTensor* output,
                            void* stream) {
  (void)backend, (void)input, (void)output, (void)stream;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status Barrier(dpl_backend* backend) {
  (void)backend;
  return DPL_ERR_UNSUPPORTED;
}

#define TEST_BACKEND_TABLE(symbol, magic, kind, abi, size, name, create_fn)                        \
  DPL_PLUGIN_EXPORT extern const dpl_backend_plugin_v1 test_table DPL_PLUGIN_ENTRY_SYMBOL(symbol); \
  const dpl_backend_plugin_v1 test_table = {                                                       \
      {size, magic, kind, abi, name, "0.0.1", "a plugin of the plugin host tests"},                \
      create_fn,                                                                                   \
      BackendDestroy,                                                                              \
      Allreduce,                                                                                   \
      Broadcast,                                                                                   \
      Allgather,                                                                                   \
      Barrier,                                                                                     \
      LastError}

#define GOOD_BACKEND(symbol, name)                                         \
  TEST_BACKEND_TABLE(symbol, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND, 1, \
                     (uint32_t)sizeof(dpl_backend_plugin_v1), name, BackendCreate)

/* The model functions every model variant shares; each fails on purpose. */
static dpl_status ModelCreate(const dpl_model_config_v1* config, dpl_model** out) {
  (void)config;
  *out = NULL;
  g_last_error = "test model has no weights on purpose";
  return DPL_ERR_INVALID_ARGUMENT;
}
static void ModelDestroy(dpl_model* model) {
  (void)model;
}
static dpl_status Describe(dpl_model* model, dpl_model_info_v1* info) {
  (void)model, (void)info;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status Parameter(dpl_model* model, uint32_t index, dpl_parameter_v1* parameter) {
  (void)model, (void)index, (void)parameter;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status SetCallback(dpl_model* model, dpl_gradient_ready_fn callback, void* context) {
  (void)model, (void)callback, (void)context;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status SetMode(dpl_model* model, dpl_model_mode mode) {
  (void)model, (void)mode;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status ZeroGradients(dpl_model* model) {
  (void)model;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status TrainStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                            float* loss) {
  (void)model, (void)input, (void)labels, (void)loss;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status EvalStep(dpl_model* model, const DLTensor* input, const DLTensor* labels,
                           double* loss_sum, int64_t* correct) {
  (void)model, (void)input, (void)labels, (void)loss_sum, (void)correct;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status State(dpl_model* model, const char* path) {
  (void)model, (void)path;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status HostBatch(dpl_model* model, int64_t capacity, DLTensor* input, DLTensor* labels) {
  (void)model, (void)capacity, (void)input, (void)labels;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status ReadTensors(dpl_model* model, dpl_model_tensors which, float* host,
                              uint64_t count) {
  (void)model, (void)which, (void)host, (void)count;
  return DPL_ERR_UNSUPPORTED;
}
static dpl_status WriteTensors(dpl_model* model, dpl_model_tensors which, const float* host,
                               uint64_t count) {
  (void)model, (void)which, (void)host, (void)count;
  return DPL_ERR_UNSUPPORTED;
}

#define MODEL_HEADER(table_type, abi, name)                                                    \
  {                                                                                            \
    (uint32_t)sizeof(table_type), DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, abi, name, "0.0.2", \
        "a model of the plugin host tests"                                                     \
  }
#define MODEL_V1_FUNCTIONS                                                                        \
  ModelCreate, ModelDestroy, Describe, Parameter, SetCallback, SetMode, ZeroGradients, TrainStep, \
      EvalStep, State, State, LastError

#if defined(TEST_PLUGIN_GOOD_BACKEND)
GOOD_BACKEND(dpl_backend_plugin_v1, "testgood");
#elif defined(TEST_PLUGIN_NAMED)
/* A well-formed backend under a given name (TEST_PLUGIN_NAMED="gloo"), for ChooseBackend. */
GOOD_BACKEND(dpl_backend_plugin_v1, TEST_PLUGIN_NAMED);
#elif defined(TEST_PLUGIN_DUPLICATE)
GOOD_BACKEND(dpl_backend_plugin_v1, "dup");
#elif defined(TEST_PLUGIN_ABI9)
GOOD_BACKEND(dpl_backend_plugin_v9, "abi9");
#elif defined(TEST_PLUGIN_ABI0)
GOOD_BACKEND(dpl_backend_plugin_v0, "abi0");
#elif defined(TEST_PLUGIN_BAD_MAGIC)
TEST_BACKEND_TABLE(dpl_backend_plugin_v1, 0x12345678u, DPL_PLUGIN_KIND_BACKEND, 1,
                   (uint32_t)sizeof(dpl_backend_plugin_v1), "badmagic", BackendCreate);
#elif defined(TEST_PLUGIN_KIND_MISMATCH)
TEST_BACKEND_TABLE(dpl_backend_plugin_v1, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_MODEL, 1,
                   (uint32_t)sizeof(dpl_backend_plugin_v1), "kindmismatch", BackendCreate);
#elif defined(TEST_PLUGIN_ABI_MISMATCH)
TEST_BACKEND_TABLE(dpl_backend_plugin_v1, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND, 2,
                   (uint32_t)sizeof(dpl_backend_plugin_v1), "abimismatch", BackendCreate);
#elif defined(TEST_PLUGIN_SMALL_TABLE)
TEST_BACKEND_TABLE(dpl_backend_plugin_v1, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND, 1,
                   (uint32_t)sizeof(dpl_plugin_header), "smalltable", BackendCreate);
#elif defined(TEST_PLUGIN_NULL_FUNCTION)
TEST_BACKEND_TABLE(dpl_backend_plugin_v1, DPL_PLUGIN_MAGIC, DPL_PLUGIN_KIND_BACKEND, 1,
                   (uint32_t)sizeof(dpl_backend_plugin_v1), "nullcreate", NULL);
#elif defined(TEST_PLUGIN_NO_SYMBOL)
/* A real shared library that simply is not a dpl plugin. */
DPL_PLUGIN_EXPORT int not_a_dpl_plugin(void);
int not_a_dpl_plugin(void) {
  return 42;
}
#elif defined(TEST_PLUGIN_GOOD_MODEL)
/* A model of ABI v1: the host adapts it to the newest table (CPU only). */
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v1 test_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v1);
const dpl_model_plugin_v1 test_table = {MODEL_HEADER(dpl_model_plugin_v1, 1, "testmodel"),
                                        MODEL_V1_FUNCTIONS};
#elif defined(TEST_PLUGIN_GOOD_MODEL_V2)
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v2 test_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v2);
const dpl_model_plugin_v2 test_table = {MODEL_HEADER(dpl_model_plugin_v2, 2, "testmodel2"),
                                        MODEL_V1_FUNCTIONS, HostBatch, ReadTensors, WriteTensors};
#elif defined(TEST_PLUGIN_MODEL_V2_NULL_HOST_BATCH)
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v2 test_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v2);
const dpl_model_plugin_v2 test_table = {MODEL_HEADER(dpl_model_plugin_v2, 2, "nohostbatch"),
                                        MODEL_V1_FUNCTIONS, NULL, ReadTensors, WriteTensors};
#elif defined(TEST_PLUGIN_MODEL_ABI99)
/* A model of an ABI version far beyond any probe: found by the symbol's pattern all the same. */
DPL_PLUGIN_EXPORT extern const dpl_model_plugin_v2 test_table
    DPL_PLUGIN_ENTRY_SYMBOL(dpl_model_plugin_v99);
const dpl_model_plugin_v2 test_table = {MODEL_HEADER(dpl_model_plugin_v2, 99, "modelabi99"),
                                        MODEL_V1_FUNCTIONS, HostBatch, ReadTensors, WriteTensors};
#elif defined(TEST_PLUGIN_THREAD_AT_LOAD)
/* A good backend whose library starts a thread as it loads: the launcher must not fork copies of
 * a process in that state (Note [One load per machine] in launcher/supervision/launch.cpp). */
#include <pthread.h>
#include <unistd.h>
static void* SleepForever(void* unused) {
  (void)unused;
  for (;;) pause();
  return NULL;
}
__attribute__((constructor)) static void StartThreadAtLoad(void) {
  pthread_t thread;
  if (pthread_create(&thread, NULL, SleepForever, NULL) == 0) pthread_detach(thread);
}
GOOD_BACKEND(dpl_backend_plugin_v1, "threadatload");
#else
#error "define one TEST_PLUGIN_* to say which test plugin to build"
#endif
