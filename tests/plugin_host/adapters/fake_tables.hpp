// What the adapter tests share: fake plugin entries that record their calls, the newest config
// with every field set, and ways to look at an adapter's required entries. Each test builds a
// table of one ABI version in memory and runs it through that version's registered adapter.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dpl/backend.h"
#include "dpl/backend_v1.h"
#include "dpl/dataset.h"
#include "dpl/model.h"
#include "dpl/model_v2.h"
#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::testing {

// The names of the fake entries called, in order.
inline std::vector<std::string>& Calls() {
  static std::vector<std::string> calls;
  return calls;
}

inline dpl_status Called(const char* name) {
  Calls().push_back(name);
  return DPL_OK;
}

// The adapter of `kind` at `version`; the test fails when there is none.
inline const Adapter& AdapterOf(dpl_plugin_kind kind, uint32_t version) {
  static const Adapter none{};
  const Adapter* adapter = FindAdapter(kind, version);
  EXPECT_NE(adapter, nullptr) << "no adapter for " << AbiName(kind, version);
  return adapter != nullptr ? *adapter : none;
}

inline dpl_plugin_header Header(dpl_plugin_kind kind, uint32_t version, size_t table_size) {
  return {uint32_t(table_size), DPL_PLUGIN_MAGIC, uint32_t(kind), version, "fake", "0", nullptr};
}

// The names of `entries`, and of those unset.
inline std::vector<std::string> Names(const RequiredEntries& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) names.emplace_back(entry.first);
  return names;
}
inline std::vector<std::string> Unset(const RequiredEntries& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) {
    if (!entry.second) names.emplace_back(entry.first);
  }
  return names;
}

// Every model capability, for checking an adapter's set whole.
inline const std::vector<ModelCapability>& AllModelCapabilities() {
  static const std::vector<ModelCapability> all = {
      ModelCapability::kHostCopy,     ModelCapability::kHostBatchSlots, ModelCapability::kBuffers,
      ModelCapability::kRngState,     ModelCapability::kAutocast,       ModelCapability::kLossScale,
      ModelCapability::kDeviceStream, ModelCapability::kStateFiles,     ModelCapability::kDataShape,
      ModelCapability::kTypedSamples, ModelCapability::kDeviceOptimizer};
  return all;
}

// The capabilities of `model` among AllModelCapabilities(), by their enum values.
inline std::vector<uint32_t> CapabilitiesOf(const ModelInterface& model) {
  std::vector<uint32_t> present;
  for (ModelCapability capability : AllModelCapabilities()) {
    if (model.Has(capability)) present.push_back(uint32_t(capability));
  }
  return present;
}

// A log context to recognise.
inline void* LogContext() {
  static int context;
  return &context;
}

// A newest model config in which every field the older configs share differs from zero.
inline dpl_model_config NewestModelConfig() {
  dpl_model_config config{};
  config.struct_size = sizeof config;
  config.options = "key=value";
  config.device_type = kDLCPU;
  config.device_id = 0;
  config.seed = 42;
  config.num_threads = 3;
  config.rank = 5;
  config.log_context = LogContext();
  config.input_ndim = 3;
  config.input_shape[0] = 1, config.input_shape[1] = 28, config.input_shape[2] = 28;
  config.num_classes = 10;
  config.precision = DPL_PRECISION_BF16;
  config.input.dtype = DLDataType{kDLFloat, 32, 1};
  config.input.ndim = 3;
  config.input.shape[0] = 1, config.input.shape[1] = 28, config.input.shape[2] = 28;
  config.target.dtype = DLDataType{kDLInt, 64, 1};
  return config;
}

// The fake entries of the types model ABI v1 defined, which later versions kept.
namespace model_v1 {
inline void Destroy(dpl_model*) {
  Called("destroy");
}
inline dpl_status Parameter(dpl_model*, uint32_t, dpl_parameter_v1*) {
  return Called("parameter");
}
inline dpl_status SetCallback(dpl_model*, dpl_gradient_ready_fn, void*) {
  return Called("set_gradient_ready_callback");
}
inline dpl_status SetMode(dpl_model*, dpl_model_mode) {
  return Called("set_mode");
}
inline dpl_status ZeroGradients(dpl_model*) {
  return Called("zero_gradients");
}
inline dpl_status TrainStep(dpl_model*, const DLTensor*, const DLTensor*, float*) {
  return Called("train_step");
}
// Model ABI v1 to v3's eval_step: a loss sum of 2.5 and 3 samples right.
inline dpl_status EvalStep(dpl_model*, const DLTensor*, const DLTensor*, double* loss_sum,
                           int64_t* correct) {
  *loss_sum = 2.5;
  *correct = 3;
  return Called("eval_step");
}
inline dpl_status SaveState(dpl_model*, const char*) {
  return Called("save_state");
}
inline dpl_status LoadState(dpl_model*, const char*) {
  return Called("load_state");
}
inline const char* LastError() {
  Called("last_error");
  return "fake error";
}

// Sets the entries above in a model table of ABI v1 or later (eval_step only in tables of v1 to
// v3, whose eval_step it is).
template <typename Table>
void Fill(Table* table) {
  table->destroy = Destroy;
  table->parameter = Parameter;
  table->set_gradient_ready_callback = SetCallback;
  table->set_mode = SetMode;
  table->zero_gradients = ZeroGradients;
  table->train_step = TrainStep;
  if constexpr (std::is_same_v<decltype(table->eval_step), decltype(&EvalStep)>) {
    table->eval_step = EvalStep;
  }
  table->save_state = SaveState;
  table->load_state = LoadState;
  table->last_error = LastError;
}

// Calls the entries above through `model`: each must reach the table's own.
inline void ExpectEntriesReachTheTable(const ModelInterface& model) {
  Calls().clear();
  dpl_parameter parameter{};
  DLTensor tensor{};
  float loss = 0;
  dpl_eval_result result{};
  result.struct_size = sizeof result;
  model.destroy(nullptr);
  EXPECT_EQ(model.parameter(nullptr, 0, &parameter), DPL_OK);
  EXPECT_EQ(model.set_gradient_ready_callback(nullptr, nullptr, nullptr), DPL_OK);
  EXPECT_EQ(model.set_mode(nullptr, DPL_MODEL_MODE_EVAL), DPL_OK);
  EXPECT_EQ(model.zero_gradients(nullptr), DPL_OK);
  EXPECT_EQ(model.train_step(nullptr, &tensor, &tensor, &loss), DPL_OK);
  EXPECT_EQ(model.eval_step(nullptr, &tensor, &tensor, &result), DPL_OK);
  EXPECT_EQ(model.save_state(nullptr, "a"), DPL_OK);
  EXPECT_EQ(model.load_state(nullptr, "a"), DPL_OK);
  EXPECT_STREQ(model.last_error(), "fake error");
  EXPECT_EQ(Calls(),
            (std::vector<std::string>{"destroy", "parameter", "set_gradient_ready_callback",
                                      "set_mode", "zero_gradients", "train_step", "eval_step",
                                      "save_state", "load_state", "last_error"}));
}

// The required entries of model ABI v1, in its table's order.
inline const std::vector<std::string>& RequiredNames() {
  static const std::vector<std::string> names = {
      "create",     "destroy",        "describe",   "parameter", "set_gradient_ready_callback",
      "set_mode",   "zero_gradients", "train_step", "eval_step", "save_state",
      "load_state", "last_error"};
  return names;
}

// Checks that an adapter of ABI v1 to v3 reports eval_step's result with one element per sample
// and describes float32 samples of the info's input shape with one int64 label each.
inline void ExpectClassLabels(const ModelInterface& model) {
  int64_t labels_shape[1] = {7};
  DLTensor labels{};
  labels.ndim = 1;
  labels.shape = labels_shape;
  dpl_eval_result result{};
  result.struct_size = sizeof result;
  ASSERT_EQ(model.eval_step(nullptr, &labels, &labels, &result), DPL_OK);
  EXPECT_EQ(result.loss_sum, 2.5);
  EXPECT_EQ(result.elements, 7);
  EXPECT_EQ(result.correct, 3);
  dpl_model_info info;
  std::memset(&info, 0xFF, sizeof info);
  ASSERT_EQ(model.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.input.dtype.code, kDLFloat);
  EXPECT_EQ(info.input.dtype.bits, 32);
  EXPECT_EQ(info.input.dtype.lanes, 1);
  ASSERT_EQ(info.input.ndim, info.input_ndim);
  for (uint32_t d = 0; d < info.input_ndim; ++d)
    EXPECT_EQ(info.input.shape[d], info.input_shape[d]);
  EXPECT_EQ(info.target.dtype.code, kDLInt);
  EXPECT_EQ(info.target.dtype.bits, 64);
  EXPECT_EQ(info.target.ndim, 0u);
}

// Checks what a plugin that knows v1's config got from the newest config: its prefix, with
// v1's struct_size, `version`, and 0 in `reserved` (where v3 put the rank).
inline void ExpectV1Prefix(const dpl_model_config_v1& got, uint32_t version) {
  const dpl_model_config newest = NewestModelConfig();
  EXPECT_EQ(got.struct_size, sizeof(dpl_model_config_v1));
  EXPECT_EQ(got.version, version);
  EXPECT_STREQ(got.options, newest.options);
  EXPECT_EQ(got.device_type, newest.device_type);
  EXPECT_EQ(got.seed, newest.seed);
  EXPECT_EQ(got.num_threads, newest.num_threads);
  EXPECT_EQ(got.reserved, 0);
  EXPECT_EQ(got.log_context, LogContext());
}

}  // namespace model_v1

// The fake entries model ABI v2 added (the host copy), which later versions kept.
namespace model_v2 {
inline dpl_status HostBatch(dpl_model*, int64_t, DLTensor*, DLTensor*) {
  return Called("host_batch");
}
inline dpl_status ReadTensors(dpl_model*, dpl_model_tensors, float*, uint64_t) {
  return Called("read_tensors");
}
inline dpl_status WriteTensors(dpl_model*, dpl_model_tensors, const float*, uint64_t) {
  return Called("write_tensors");
}

template <typename Table>
void Fill(Table* table) {
  table->host_batch = HostBatch;
  table->read_tensors = ReadTensors;
  table->write_tensors = WriteTensors;
}
}  // namespace model_v2

// The fake entries model ABI v3 added, which later versions kept.
namespace model_v3 {
inline dpl_status Buffer(dpl_model*, uint32_t, dpl_buffer_v3*) {
  return Called("buffer");
}
inline dpl_status ReadBuffers(dpl_model*, void*, uint64_t) {
  return Called("read_buffers");
}
inline dpl_status WriteBuffers(dpl_model*, const void*, uint64_t) {
  return Called("write_buffers");
}
inline dpl_status RngState(dpl_model*, void*, uint64_t, uint64_t*) {
  return Called("rng_state");
}
inline dpl_status SetRngState(dpl_model*, const void*, uint64_t) {
  return Called("set_rng_state");
}
inline dpl_status HostBatchSlot(dpl_model*, uint32_t, int64_t, DLTensor*, DLTensor*) {
  return Called("host_batch_slot");
}
inline dpl_status SetLossScale(dpl_model*, float) {
  return Called("set_loss_scale");
}

template <typename Table>
void Fill(Table* table) {
  table->buffer = Buffer;
  table->read_buffers = ReadBuffers;
  table->write_buffers = WriteBuffers;
  table->rng_state = RngState;
  table->set_rng_state = SetRngState;
  table->host_batch_slot = HostBatchSlot;
  table->set_loss_scale = SetLossScale;
}

// Calls the host copy's entries and v3's through `model`: each must reach the table's own.
inline void ExpectEntriesReachTheTable(const ModelInterface& model) {
  Calls().clear();
  DLTensor tensor{};
  dpl_buffer buffer{};
  float host = 0;
  uint64_t size = 0;
  EXPECT_EQ(model.host_batch(nullptr, 1, &tensor, &tensor), DPL_OK);
  EXPECT_EQ(model.read_tensors(nullptr, DPL_MODEL_TENSORS_VALUES, &host, 1), DPL_OK);
  EXPECT_EQ(model.write_tensors(nullptr, DPL_MODEL_TENSORS_VALUES, &host, 1), DPL_OK);
  EXPECT_EQ(model.buffer(nullptr, 0, &buffer), DPL_OK);
  EXPECT_EQ(model.read_buffers(nullptr, &host, 4), DPL_OK);
  EXPECT_EQ(model.write_buffers(nullptr, &host, 4), DPL_OK);
  EXPECT_EQ(model.rng_state(nullptr, &host, 4, &size), DPL_OK);
  EXPECT_EQ(model.set_rng_state(nullptr, &host, 4), DPL_OK);
  EXPECT_EQ(model.host_batch_slot(nullptr, 1, 1, &tensor, &tensor), DPL_OK);
  EXPECT_EQ(model.set_loss_scale(nullptr, 2.0f), DPL_OK);
  EXPECT_EQ(Calls(),
            (std::vector<std::string>{"host_batch", "read_tensors", "write_tensors", "buffer",
                                      "read_buffers", "write_buffers", "rng_state", "set_rng_state",
                                      "host_batch_slot", "set_loss_scale"}));
}
}  // namespace model_v3

// The fake entries of the types backend ABI v1 defined, which later versions kept.
namespace backend_v1 {
inline void Destroy(dpl_backend*) {
  Called("destroy");
}
inline dpl_status Allreduce(dpl_backend*, DLTensor*, dpl_reduce_op, void*) {
  return Called("allreduce");
}
inline dpl_status Broadcast(dpl_backend*, DLTensor*, int32_t, void*) {
  return Called("broadcast");
}
inline dpl_status Allgather(dpl_backend*, const DLTensor*, DLTensor*, void*) {
  return Called("allgather");
}
inline dpl_status Barrier(dpl_backend*) {
  return Called("barrier");
}
inline const char* LastError() {
  Called("last_error");
  return "fake error";
}

template <typename Table>
void Fill(Table* table) {
  table->destroy = Destroy;
  table->allreduce = Allreduce;
  table->broadcast = Broadcast;
  table->allgather = Allgather;
  table->barrier = Barrier;
  table->last_error = LastError;
}

inline void ExpectEntriesReachTheTable(const BackendInterface& backend) {
  Calls().clear();
  DLTensor tensor{};
  backend.destroy(nullptr);
  EXPECT_EQ(backend.allreduce(nullptr, &tensor, DPL_REDUCE_SUM, nullptr), DPL_OK);
  EXPECT_EQ(backend.broadcast(nullptr, &tensor, 0, nullptr), DPL_OK);
  EXPECT_EQ(backend.allgather(nullptr, &tensor, &tensor, nullptr), DPL_OK);
  EXPECT_EQ(backend.barrier(nullptr), DPL_OK);
  EXPECT_STREQ(backend.last_error(), "fake error");
  EXPECT_EQ(Calls(), (std::vector<std::string>{"destroy", "allreduce", "broadcast", "allgather",
                                               "barrier", "last_error"}));
}

// A newest backend config with every field set.
inline dpl_backend_config NewestConfig() {
  dpl_backend_config config{};
  config.struct_size = sizeof config;
  config.rank = 1;
  config.world_size = 4;
  config.local_rank = 1;
  config.local_world_size = 2;
  config.device_type = kDLCPU;
  config.timeout_ms = 1234;
  config.log_context = LogContext();
  config.options = "interface=lo";
  config.local_address = "10.0.0.2";
  return config;
}

// Checks the fields of backend ABI v1's config in what a plugin got.
template <typename Config>
void ExpectV1Fields(const Config& got) {
  const dpl_backend_config newest = NewestConfig();
  EXPECT_EQ(got.rank, newest.rank);
  EXPECT_EQ(got.world_size, newest.world_size);
  EXPECT_EQ(got.local_rank, newest.local_rank);
  EXPECT_EQ(got.local_world_size, newest.local_world_size);
  EXPECT_EQ(got.timeout_ms, newest.timeout_ms);
  EXPECT_EQ(got.log_context, LogContext());
  EXPECT_STREQ(got.options, newest.options);
}

inline const std::vector<std::string>& RequiredNames() {
  static const std::vector<std::string> names = {"create",    "destroy", "allreduce", "broadcast",
                                                 "allgather", "barrier", "last_error"};
  return names;
}

// Note [Collectives older backends lack] (plugin_host/adapters/backend_v1.hpp), checked through
// fakes of the older entries: a create that hands out a handle, an allreduce that doubles every
// float (two equal ranks), an allgather that copies its input into every slot and refuses
// overlapping tensors, as v1's contract does.
inline dpl_backend* FakeHandle() {
  static int handle;
  return reinterpret_cast<dpl_backend*>(&handle);
}
template <typename Config>
dpl_status CreateHandle(const Config*, dpl_backend** out) {
  *out = FakeHandle();
  return DPL_OK;
}
inline dpl_status DoublingAllreduce(dpl_backend*, DLTensor* tensor, dpl_reduce_op, void*) {
  auto* values = static_cast<float*>(tensor->data);
  for (int64_t i = 0; i < tensor->shape[0]; ++i) values[i] *= 2.0f;
  return Called("allreduce");
}
inline dpl_status CopyingAllgather(dpl_backend*, const DLTensor* input, DLTensor* output, void*) {
  const auto* in = static_cast<const float*>(input->data);
  auto* out = static_cast<float*>(output->data);
  const int64_t n = input->shape[0], total = output->shape[0];
  if (in + n > out && out + total > in) return DPL_ERR_INVALID_ARGUMENT;
  for (int64_t i = 0; i < total; ++i) out[i] = in[i % n];
  return Called("allgather");
}
template <typename Table>
void FillCollectiveFakes(Table* table) {
  table->create = CreateHandle;
  table->allreduce = DoublingAllreduce;
  table->allgather = CopyingAllgather;
}

inline DLTensor Floats(float* data, int64_t* count, int32_t device = kDLCPU) {
  return DLTensor{data, {DLDeviceType(device), 0}, 1, {kDLFloat, 32, 1}, count, nullptr, 0};
}

// `backend`: an older table with FillCollectiveFakes, adapted. The instance is rank 1 of 4.
inline void ExpectCollectivesOfV3(const BackendInterface& backend) {
  EXPECT_FALSE(backend.Has(BackendCapability::kReduceScatter));
  dpl_backend_config config = NewestConfig();
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  float data[8] = {1, 2, 3, 4, 5, 6, 7, 8}, slice[2] = {};
  int64_t eight = 8, two = 2;
  DLTensor input = Floats(data, &eight), apart = Floats(slice, &two);
  Calls().clear();
  ASSERT_EQ(backend.reduce_scatter(instance, &input, &apart, DPL_REDUCE_SUM, nullptr), DPL_OK);
  EXPECT_EQ(std::vector<float>(slice, slice + 2), (std::vector<float>{6, 8}));
  DLTensor in_place = Floats(data + 2, &two);
  ASSERT_EQ(backend.reduce_scatter(instance, &input, &in_place, DPL_REDUCE_SUM, nullptr), DPL_OK);
  EXPECT_EQ(std::vector<float>(data + 2, data + 4), (std::vector<float>{12, 16}));
  float gathered[8] = {0, 0, 9, 10, 0, 0, 0, 0};
  DLTensor output = Floats(gathered, &eight), own = Floats(gathered + 2, &two);
  ASSERT_EQ(backend.allgather(instance, &own, &output, nullptr), DPL_OK);
  EXPECT_EQ(std::vector<float>(gathered, gathered + 8),
            (std::vector<float>{9, 10, 9, 10, 9, 10, 9, 10}));
  EXPECT_EQ(Calls(), (std::vector<std::string>{"allreduce", "allreduce", "allgather"}));
  // Its own refusals, then the plugin's error again after a call of the plugin's.
  DLTensor overlapping = Floats(data + 1, &two);
  EXPECT_EQ(backend.reduce_scatter(instance, &input, &overlapping, DPL_REDUCE_SUM, nullptr),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(backend.last_error(),
               "backend adapter: reduce_scatter output overlaps its input without being slice 1 "
               "of it (the in-place form)");
  DLTensor on_device = Floats(slice, &two, kDLCUDA);
  EXPECT_EQ(backend.reduce_scatter(instance, &input, &on_device, DPL_REDUCE_SUM, nullptr),
            DPL_ERR_UNSUPPORTED);
  EXPECT_EQ(backend.barrier(instance), DPL_OK);
  EXPECT_STREQ(backend.last_error(), "fake error");
  backend.destroy(instance);
  EXPECT_EQ(backend.reduce_scatter(instance, &input, &apart, DPL_REDUCE_SUM, nullptr),
            DPL_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(backend.last_error(),
               "backend adapter: reduce_scatter on an instance not created here");
}

}  // namespace backend_v1

// The fake entries of the types dataset ABI v1 defined, which v2 kept (its config is v1's); each
// test adds its version's describe.
namespace dataset_v1 {
inline dpl_dataset_config_v1& CreatedWith() {
  static dpl_dataset_config_v1 config;
  return config;
}
inline dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
  CreatedWith() = *config;
  *out = nullptr;
  return DPL_OK;
}
inline void Destroy(dpl_dataset*) {
  Called("destroy");
}
// The data of the tensors the last fill got: input, target.
inline std::pair<void*, void*>& FilledData() {
  static std::pair<void*, void*> data;
  return data;
}
inline dpl_status Fill(dpl_dataset*, const int64_t*, int64_t, DLTensor* input, DLTensor* target) {
  FilledData() = {input->data, target->data};
  return Called("fill");
}
inline const char* LastError() {
  Called("last_error");
  return "fake error";
}

// A dataset table of `version` with the entries above and `describe`.
template <typename Table, typename Describe>
Table MakeTable(uint32_t version, Describe describe) {
  Table table{};
  table.header = Header(DPL_PLUGIN_KIND_DATASET, version, sizeof table);
  table.create = Create;
  table.destroy = Destroy;
  table.describe = describe;
  table.fill = Fill;
  table.last_error = LastError;
  return table;
}

// Calls destroy, fill and last_error through `dataset`: each must reach the table's own, fill
// with the very tensors it was given.
inline void ExpectEntriesReachTheTable(const DatasetInterface& dataset) {
  Calls().clear();
  const int64_t index = 0;
  int64_t input_values[4], target_values[4];
  DLTensor input{}, target{};
  input.data = input_values;
  target.data = target_values;
  dataset.destroy(nullptr);
  EXPECT_EQ(dataset.fill(nullptr, &index, 0, &input, &target), DPL_OK);
  EXPECT_EQ(FilledData(), (std::pair<void*, void*>(input_values, target_values)));
  EXPECT_STREQ(dataset.last_error(), "fake error");
  EXPECT_EQ(Calls(), (std::vector<std::string>{"destroy", "fill", "last_error"}));
}

inline const std::vector<std::string>& RequiredNames() {
  static const std::vector<std::string> names = {"create", "destroy", "describe", "fill",
                                                 "last_error"};
  return names;
}
}  // namespace dataset_v1

}  // namespace dpl::plugin_host::testing
