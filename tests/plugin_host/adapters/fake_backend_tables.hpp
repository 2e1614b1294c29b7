// The fake backend tables of the adapter tests: entries of the types backend ABI v1 defined,
// which later versions kept, the newest config, and fakes of the collectives older backends lack.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dpl/backend.h"
#include "dpl/backend_v1.h"
#include "fake_entries.hpp"
#include "plugin_host/adapter_registry.hpp"
#include "training/collectives/backend.hpp"

namespace dpl::plugin_host::testing {

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
  EXPECT_FALSE(backend.Has(BackendCapability::kAbort));
  EXPECT_FALSE(backend.abort);
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

// Tables of version 3 and later: v1's fakes around the fake handle, synchronize and
// reduce_scatter recorded, and the adapted table in a training::Backend.
namespace backend_v3 {
inline dpl_status Synchronize(dpl_backend*, void*) {
  return Called("synchronize");
}
inline dpl_status ReduceScatter(dpl_backend*, DLTensor*, DLTensor*, dpl_reduce_op, void*) {
  return Called("reduce_scatter");
}
template <typename Table>
Table TableOf(uint32_t version) {
  Table table{};
  table.header = Header(DPL_PLUGIN_KIND_BACKEND, version, sizeof table);
  backend_v1::Fill(&table);
  table.create = backend_v1::CreateHandle;
  table.synchronize = Synchronize;
  table.reduce_scatter = ReduceScatter;
  return table;
}
// `table` adapted and owned by a training::Backend around the fake instance.
template <typename Table>
std::unique_ptr<training::Backend> TrainingBackend(const Table& table, uint32_t version) {
  auto adapted = std::make_shared<const BackendInterface>(
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, version), &table));
  return std::make_unique<training::Backend>(adapted, backend_v1::FakeHandle(),
                                             PluginLabel{"backend", "fake", ""}, kDLCPU);
}
}  // namespace backend_v3

}  // namespace dpl::plugin_host::testing
