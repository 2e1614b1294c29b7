// The adapter of model ABI v2 (plugin_host/adapters/model_v2.cpp).
#include "dpl/model_v2.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_model_config_v2 created_with;

dpl_status Create(const dpl_model_config_v2* config, dpl_model** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_status Describe(dpl_model*, dpl_model_info_v2* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_model_info_v2));
  info->input_ndim = 1;
  info->input_shape[0] = 784;
  info->num_classes = 10;
  info->parameter_count = 2;
  return DPL_OK;
}

dpl_model_plugin_v2 Table() {
  dpl_model_plugin_v2 table{};
  table.header = Header(DPL_PLUGIN_KIND_MODEL, 2, sizeof table);
  table.create = Create;
  table.describe = Describe;
  model_v1::Fill(&table);
  model_v2::Fill(&table);
  return table;
}

TEST(ModelV2Adapter, HasTheHostCopyOnly) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 2);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_model_plugin_v2));
  const dpl_model_plugin_v2 table = Table();
  const ModelInterface model = AdaptTable<ModelInterface>(adapter, &table);
  EXPECT_EQ(model.abi, "model ABI v2");
  EXPECT_EQ(CapabilitiesOf(model), std::vector<uint32_t>{uint32_t(ModelCapability::kHostCopy)});
  EXPECT_FALSE(model.buffer || model.read_buffers || model.write_buffers || model.rng_state ||
               model.set_rng_state || model.host_batch_slot || model.set_loss_scale);
  model_v1::ExpectEntriesReachTheTable(model);
  Calls().clear();
  DLTensor tensor{};
  float host = 0;
  EXPECT_EQ(model.host_batch(nullptr, 1, &tensor, &tensor), DPL_OK);
  EXPECT_EQ(model.read_tensors(nullptr, DPL_MODEL_TENSORS_VALUES, &host, 1), DPL_OK);
  EXPECT_EQ(model.write_tensors(nullptr, DPL_MODEL_TENSORS_GRADIENTS, &host, 1), DPL_OK);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"host_batch", "read_tensors", "write_tensors"}));
}

TEST(ModelV2Adapter, TakesClassLabelsOneElementPerSample) {
  const dpl_model_plugin_v2 table = Table();
  model_v1::ExpectClassLabels(
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 2), &table));
}

TEST(ModelV2Adapter, CreateGetsTheV1PrefixOfTheConfigAsVersion2) {
  const dpl_model_plugin_v2 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 2), &table);
  const dpl_model_config config = NewestModelConfig();
  dpl_model* instance = nullptr;
  ASSERT_EQ(model.create(&config, &instance), DPL_OK);
  model_v1::ExpectV1Prefix(created_with, 2);
}

TEST(ModelV2Adapter, DescribeFillsTheNewestInfo) {
  const dpl_model_plugin_v2 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 2), &table);
  dpl_model_info info;
  std::memset(&info, 0xFF, sizeof info);
  ASSERT_EQ(model.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.struct_size, sizeof(dpl_model_info));
  EXPECT_EQ(info.input_shape[0], 784);
  EXPECT_EQ(info.parameter_count, 2u);
  EXPECT_EQ(info.buffer_count, 0u);
  EXPECT_EQ(info.flags, 0u);
  EXPECT_EQ(info.stream, nullptr);
}

TEST(ModelV2Adapter, RequiresTheHostCopyFirst) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 2);
  std::vector<std::string> names = {"host_batch", "read_tensors", "write_tensors"};
  names.insert(names.end(), model_v1::RequiredNames().begin(), model_v1::RequiredNames().end());
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_model_plugin_v2 table = Table();
  table.host_batch = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"host_batch"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
