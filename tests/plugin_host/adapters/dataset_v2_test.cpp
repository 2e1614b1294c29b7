// The adapter of dataset ABI v2 (plugin_host/adapters/dataset_v2.cpp).
#include <vector>

#include "adapters/fake_tables.hpp"
#include "dpl/dataset_v2.h"

namespace dpl::plugin_host::testing {
namespace {

using dataset_v1::CreatedWith;
using dataset_v1::ExpectEntriesReachTheTable;
using dataset_v1::MakeTable;
using dataset_v1::RequiredNames;

// A language model's samples: 16 token ids in, the next 16 out, in a vocabulary of 65.
dpl_status Describe(dpl_dataset*, dpl_dataset_info_v2* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_dataset_info_v2));
  info->input.dtype = {kDLInt, 64, 1};
  info->input.ndim = 1;
  info->input.shape[0] = 16;
  info->target = info->input;
  info->count = 999;
  info->num_classes = 65;
  return DPL_OK;
}

dpl_dataset_plugin_v2 Table() {
  return MakeTable<dpl_dataset_plugin_v2>(2, Describe);
}

TEST(DatasetV2Adapter, EveryEntryReachesTheTable) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 2);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_dataset_plugin_v2));
  EXPECT_EQ(adapter.capabilities, 0u);
  const dpl_dataset_plugin_v2 table = Table();
  const DatasetInterface dataset = AdaptTable<DatasetInterface>(adapter, &table);
  EXPECT_EQ(dataset.abi, "dataset ABI v2");
  ExpectEntriesReachTheTable(dataset);
}

TEST(DatasetV2Adapter, CreateGetsTheConfigAndDescribeTheTypedInfo) {
  const dpl_dataset_plugin_v2 table = Table();
  const DatasetInterface dataset =
      AdaptTable<DatasetInterface>(AdapterOf(DPL_PLUGIN_KIND_DATASET, 2), &table);
  dpl_dataset_config config{};
  config.struct_size = sizeof config;
  config.path = "/data/tokens";
  config.options = "block=16";
  config.split = DPL_DATASET_SPLIT_VALIDATION;
  config.num_threads = 3;
  config.cache_dir = "/cache";
  config.seed = 11;
  config.log_context = LogContext();
  dpl_dataset* instance = nullptr;
  ASSERT_EQ(dataset.create(&config, &instance), DPL_OK);
  EXPECT_EQ(CreatedWith().struct_size, sizeof(dpl_dataset_config_v2));
  EXPECT_EQ(CreatedWith().version, 2u);
  EXPECT_STREQ(CreatedWith().path, "/data/tokens");
  EXPECT_STREQ(CreatedWith().options, "block=16");
  EXPECT_EQ(CreatedWith().split, DPL_DATASET_SPLIT_VALIDATION);  // v2 knows it
  EXPECT_EQ(CreatedWith().num_threads, 3);
  EXPECT_STREQ(CreatedWith().cache_dir, "/cache");
  EXPECT_EQ(CreatedWith().seed, 11u);
  EXPECT_EQ(CreatedWith().log_context, LogContext());
  dpl_dataset_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(dataset.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.input.dtype.code, kDLInt);
  EXPECT_EQ(info.input.dtype.bits, 64);
  EXPECT_EQ(info.input.ndim, 1u);
  EXPECT_EQ(info.input.shape[0], 16);
  EXPECT_EQ(info.target.ndim, 1u);
  EXPECT_EQ(info.target.shape[0], 16);
  EXPECT_EQ(info.count, 999);
  EXPECT_EQ(info.num_classes, 65);
}

TEST(DatasetV2Adapter, RequiresEveryEntry) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 2);
  EXPECT_EQ(Names(adapter.required(nullptr)), RequiredNames());
  dpl_dataset_plugin_v2 table = Table();
  table.describe = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"describe"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
