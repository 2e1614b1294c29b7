// The adapter of model ABI v3 (plugin_host/adapters/model_v3.cpp).
#include "dpl/model_v3.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_model_config_v3 created_with;
int stream_marker;

dpl_status Create(const dpl_model_config_v3* config, dpl_model** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_status Describe(dpl_model*, dpl_model_info_v3* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_model_info_v3));
  info->input_ndim = 3;
  info->num_classes = 10;
  info->parameter_count = 6;
  info->buffer_count = 3;
  info->flags = DPL_MODEL_BROADCAST_BUFFERS;
  info->stream = &stream_marker;
  return DPL_OK;
}

dpl_model_plugin_v3 Table() {
  dpl_model_plugin_v3 table{};
  table.header = Header(DPL_PLUGIN_KIND_MODEL, 3, sizeof table);
  table.create = Create;
  table.describe = Describe;
  model_v1::Fill(&table);
  model_v2::Fill(&table);
  model_v3::Fill(&table);
  return table;
}

TEST(ModelV3Adapter, HasEveryCapabilityButV4s) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 3);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_model_plugin_v3));
  const dpl_model_plugin_v3 table = Table();
  const ModelInterface model = AdaptTable<ModelInterface>(adapter, &table);
  EXPECT_EQ(model.abi, "model ABI v3");
  std::vector<uint32_t> expected;
  for (ModelCapability capability : AllModelCapabilities()) {
    if (capability != ModelCapability::kTypedSamples &&
        capability != ModelCapability::kDeviceOptimizer) {
      expected.push_back(uint32_t(capability));
    }
  }
  EXPECT_EQ(CapabilitiesOf(model), expected);
  EXPECT_FALSE(model.set_optimizer || model.gradient_statistics || model.apply_update);
  model_v1::ExpectEntriesReachTheTable(model);
  model_v3::ExpectEntriesReachTheTable(model);
}

TEST(ModelV3Adapter, TakesClassLabelsOneElementPerSample) {
  const dpl_model_plugin_v3 table = Table();
  model_v1::ExpectClassLabels(
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 3), &table));
}

TEST(ModelV3Adapter, CreateGetsTheV3PrefixOfTheConfig) {
  const dpl_model_plugin_v3 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 3), &table);
  dpl_model_config config = NewestModelConfig();
  config.version = 0;  // the adapter's to set
  dpl_model* instance = nullptr;
  ASSERT_EQ(model.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_model_config_v3));
  EXPECT_EQ(created_with.version, 3u);
  EXPECT_EQ(created_with.rank, 5);
  EXPECT_EQ(created_with.log_context, LogContext());
  EXPECT_EQ(created_with.input_ndim, 3u);
  EXPECT_EQ(created_with.input_shape[2], 28);
  EXPECT_EQ(created_with.num_classes, 10);
  EXPECT_EQ(created_with.precision, DPL_PRECISION_BF16);
}

TEST(ModelV3Adapter, DescribeFillsTheWholeInfo) {
  const dpl_model_plugin_v3 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 3), &table);
  dpl_model_info info{};
  ASSERT_EQ(model.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.struct_size, sizeof(dpl_model_info));
  EXPECT_EQ(info.parameter_count, 6u);
  EXPECT_EQ(info.buffer_count, 3u);
  EXPECT_EQ(info.flags, DPL_MODEL_BROADCAST_BUFFERS);
  EXPECT_EQ(info.stream, &stream_marker);
}

TEST(ModelV3Adapter, RequiresEveryEntryInTheOrderOfItsChecks) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 3);
  std::vector<std::string> names = {"buffer",     "read_buffers",  "write_buffers",
                                    "rng_state",  "set_rng_state", "host_batch_slot",
                                    "host_batch", "read_tensors",  "write_tensors"};
  names.insert(names.end(), model_v1::RequiredNames().begin(), model_v1::RequiredNames().end());
  names.push_back("set_loss_scale");
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_model_plugin_v3 table = Table();
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{});
  table.set_loss_scale = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"set_loss_scale"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
