// What the adapter tests share: fake plugin entries that record their calls, the newest config
// with every field set, and ways to look at an adapter's required entries (fake_entries.hpp;
// the backends' in fake_backend_tables.hpp). Each test builds a
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
#include "fake_backend_tables.hpp"
#include "fake_entries.hpp"
#include "plugin_host/adapter_registry.hpp"

namespace dpl::plugin_host::testing {

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
