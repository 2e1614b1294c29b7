// The adapter of model ABI v1 (plugin_host/adapters/model_v1.cpp).
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_model_config_v1 created_with;

dpl_status Create(const dpl_model_config_v1* config, dpl_model** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_status Describe(dpl_model*, dpl_model_info_v1* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_model_info_v1));
  info->input_ndim = 2;
  info->input_shape[0] = 28, info->input_shape[1] = 28;
  info->num_classes = 10;
  info->parameter_count = 4;
  return DPL_OK;
}

dpl_model_plugin_v1 Table() {
  dpl_model_plugin_v1 table{};
  table.header = Header(DPL_PLUGIN_KIND_MODEL, 1, sizeof table);
  table.create = Create;
  table.describe = Describe;
  model_v1::Fill(&table);
  return table;
}

TEST(ModelV1Adapter, HasNoCapability) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 1);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_model_plugin_v1));
  const dpl_model_plugin_v1 table = Table();
  const ModelInterface model = AdaptTable<ModelInterface>(adapter, &table);
  EXPECT_EQ(model.abi, "model ABI v1");
  EXPECT_EQ(CapabilitiesOf(model), std::vector<uint32_t>{});
  EXPECT_FALSE(model.host_batch || model.read_tensors || model.write_tensors || model.buffer ||
               model.read_buffers || model.write_buffers || model.rng_state ||
               model.set_rng_state || model.host_batch_slot || model.set_loss_scale);
  model_v1::ExpectEntriesReachTheTable(model);
}

TEST(ModelV1Adapter, TakesClassLabelsOneElementPerSample) {
  const dpl_model_plugin_v1 table = Table();
  model_v1::ExpectClassLabels(
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 1), &table));
}

TEST(ModelV1Adapter, CreateGetsTheV1PrefixOfTheConfig) {
  const dpl_model_plugin_v1 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 1), &table);
  const dpl_model_config config = NewestModelConfig();
  dpl_model* instance = nullptr;
  ASSERT_EQ(model.create(&config, &instance), DPL_OK);
  model_v1::ExpectV1Prefix(created_with, 1);
}

TEST(ModelV1Adapter, DescribeFillsTheNewestInfo) {
  const dpl_model_plugin_v1 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 1), &table);
  dpl_model_info info;
  std::memset(&info, 0xFF, sizeof info);  // what v1 does not know must come back zero
  ASSERT_EQ(model.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.struct_size, sizeof(dpl_model_info));
  EXPECT_EQ(info.input_ndim, 2u);
  EXPECT_EQ(info.input_shape[1], 28);
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_EQ(info.parameter_count, 4u);
  EXPECT_EQ(info.buffer_count, 0u);
  EXPECT_EQ(info.flags, 0u);
  EXPECT_EQ(info.stream, nullptr);
}

TEST(ModelV1Adapter, RequiresEveryV1Entry) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 1);
  EXPECT_EQ(Names(adapter.required(nullptr)), model_v1::RequiredNames());
  dpl_model_plugin_v1 table = Table();
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{});
  table.train_step = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"train_step"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
