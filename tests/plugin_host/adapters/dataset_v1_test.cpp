// The adapter of dataset ABI v1 (plugin_host/adapters/dataset_v1.cpp).
#include "dpl/dataset_v1.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_dataset_config_v1 created_with;

dpl_status Create(const dpl_dataset_config_v1* config, dpl_dataset** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}
void Destroy(dpl_dataset*) {
  Called("destroy");
}
dpl_status Describe(dpl_dataset*, dpl_dataset_info_v1* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_dataset_info_v1));
  info->sample_ndim = 3;
  info->sample_shape[0] = 3, info->sample_shape[1] = 32, info->sample_shape[2] = 32;
  info->count = 50000;
  info->num_classes = 10;
  return DPL_OK;
}
dpl_status Fill(dpl_dataset*, const int64_t*, int64_t, DLTensor*, DLTensor*) {
  return Called("fill");
}
const char* LastError() {
  Called("last_error");
  return "fake error";
}

dpl_dataset_plugin_v1 Table() {
  dpl_dataset_plugin_v1 table{};
  table.header = Header(DPL_PLUGIN_KIND_DATASET, 1, sizeof table);
  table.create = Create;
  table.destroy = Destroy;
  table.describe = Describe;
  table.fill = Fill;
  table.last_error = LastError;
  return table;
}

TEST(DatasetV1Adapter, EveryEntryReachesTheTable) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 1);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_dataset_plugin_v1));
  EXPECT_EQ(adapter.capabilities, 0u);
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset = AdaptTable<DatasetInterface>(adapter, &table);
  EXPECT_EQ(dataset.abi, "dataset ABI v1");
  Calls().clear();
  const int64_t index = 0;
  DLTensor tensor{};
  dataset.destroy(nullptr);
  EXPECT_EQ(dataset.fill(nullptr, &index, 0, &tensor, &tensor), DPL_OK);
  EXPECT_STREQ(dataset.last_error(), "fake error");
  EXPECT_EQ(Calls(), (std::vector<std::string>{"destroy", "fill", "last_error"}));
}

TEST(DatasetV1Adapter, CreateGetsTheConfigAndDescribeFillsTheInfo) {
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset =
      AdaptTable<DatasetInterface>(AdapterOf(DPL_PLUGIN_KIND_DATASET, 1), &table);
  dpl_dataset_config config{};
  config.struct_size = sizeof config;
  config.path = "/data";
  config.options = "";
  config.split = DPL_DATASET_SPLIT_TEST;
  config.num_threads = 2;
  config.cache_dir = "";
  config.seed = 7;
  config.log_context = LogContext();
  dpl_dataset* instance = nullptr;
  ASSERT_EQ(dataset.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_dataset_config_v1));
  EXPECT_EQ(created_with.version, 1u);
  EXPECT_STREQ(created_with.path, "/data");
  EXPECT_EQ(created_with.split, DPL_DATASET_SPLIT_TEST);
  EXPECT_EQ(created_with.seed, 7u);
  EXPECT_EQ(created_with.log_context, LogContext());
  dpl_dataset_info info{};
  ASSERT_EQ(dataset.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.struct_size, sizeof(dpl_dataset_info));
  EXPECT_EQ(info.sample_ndim, 3u);
  EXPECT_EQ(info.sample_shape[2], 32);
  EXPECT_EQ(info.count, 50000);
}

TEST(DatasetV1Adapter, RequiresEveryEntry) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 1);
  EXPECT_EQ(Names(adapter.required(nullptr)),
            (std::vector<std::string>{"create", "destroy", "describe", "fill", "last_error"}));
  dpl_dataset_plugin_v1 table = Table();
  table.fill = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"fill"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
