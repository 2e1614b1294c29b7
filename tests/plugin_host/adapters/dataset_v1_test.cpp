// The adapter of dataset ABI v1 (plugin_host/adapters/dataset_v1.cpp).
#include <cstring>
#include <utility>

#include "adapters/fake_tables.hpp"
#include "dpl/dataset.h"
#include "dpl/dataset_v1.h"

namespace dpl::plugin_host::testing {
namespace {

using dataset_v1::CreatedWith;
using dataset_v1::ExpectEntriesReachTheTable;
using dataset_v1::MakeTable;
using dataset_v1::RequiredNames;

dpl_status Describe(dpl_dataset*, dpl_dataset_info_v1* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_dataset_info_v1));
  info->sample_ndim = 3;
  info->sample_shape[0] = 3, info->sample_shape[1] = 32, info->sample_shape[2] = 32;
  info->count = 50000;
  info->num_classes = 10;
  return DPL_OK;
}

dpl_dataset_plugin_v1 Table() {
  return MakeTable<dpl_dataset_plugin_v1>(1, Describe);
}

TEST(DatasetV1Adapter, EveryEntryReachesTheTable) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 1);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_dataset_plugin_v1));
  EXPECT_EQ(adapter.capabilities, 0u);
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset = AdaptTable<DatasetInterface>(adapter, &table);
  EXPECT_EQ(dataset.abi, "dataset ABI v1");
  ExpectEntriesReachTheTable(dataset);
}

// The newest config with every field set, and the split asked for.
dpl_dataset_config NewestConfig(int32_t split) {
  dpl_dataset_config config{};
  config.struct_size = sizeof config;
  config.version = DPL_DATASET_ABI_VERSION;
  config.path = "/data";
  config.options = "";
  config.split = split;
  config.num_threads = 2;
  config.cache_dir = "";
  config.seed = 7;
  config.log_context = LogContext();
  return config;
}

TEST(DatasetV1Adapter, CreateGetsTheConfigAndDescribeFillsTheInfo) {
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset =
      AdaptTable<DatasetInterface>(AdapterOf(DPL_PLUGIN_KIND_DATASET, 1), &table);
  const dpl_dataset_config config = NewestConfig(DPL_DATASET_SPLIT_TEST);
  dpl_dataset* instance = nullptr;
  ASSERT_EQ(dataset.create(&config, &instance), DPL_OK);
  EXPECT_EQ(CreatedWith().struct_size, sizeof(dpl_dataset_config_v1));
  EXPECT_EQ(CreatedWith().version, 1u);
  EXPECT_STREQ(CreatedWith().path, "/data");
  EXPECT_EQ(CreatedWith().split, DPL_DATASET_SPLIT_TEST);
  EXPECT_EQ(CreatedWith().num_threads, 2);
  EXPECT_EQ(CreatedWith().seed, 7u);
  EXPECT_EQ(CreatedWith().log_context, LogContext());
}

// Note [Adapting dataset ABI v1]: float32 input of sample_shape, an int64 target of shape ().
TEST(DatasetV1Adapter, DescribeTypesTheSamples) {
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset =
      AdaptTable<DatasetInterface>(AdapterOf(DPL_PLUGIN_KIND_DATASET, 1), &table);
  dpl_dataset_info info;
  std::memset(&info, 0xab, sizeof info);  // every byte the adapter leaves is visible
  info.struct_size = sizeof info;
  ASSERT_EQ(dataset.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.struct_size, sizeof(dpl_dataset_info));
  EXPECT_EQ(info.reserved, 0u);
  EXPECT_EQ(info.input.dtype.code, kDLFloat);
  EXPECT_EQ(info.input.dtype.bits, 32);
  EXPECT_EQ(info.input.dtype.lanes, 1);
  ASSERT_EQ(info.input.ndim, 3u);
  EXPECT_EQ(std::vector<int64_t>(info.input.shape, info.input.shape + 3),
            (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(info.input.shape[3], 0);
  EXPECT_EQ(info.target.dtype.code, kDLInt);
  EXPECT_EQ(info.target.dtype.bits, 64);
  EXPECT_EQ(info.target.dtype.lanes, 1);
  EXPECT_EQ(info.target.ndim, 0u);
  EXPECT_EQ(info.target.shape[0], 0);
  EXPECT_EQ(info.count, 50000);
  EXPECT_EQ(info.num_classes, 10);
}

// A v1 plugin has no validation split: it is asked for its test split instead.
TEST(DatasetV1Adapter, TheTestSplitServesValidation) {
  const dpl_dataset_plugin_v1 table = Table();
  const DatasetInterface dataset =
      AdaptTable<DatasetInterface>(AdapterOf(DPL_PLUGIN_KIND_DATASET, 1), &table);
  dpl_dataset* instance = nullptr;
  for (const auto& [asked, given] : std::vector<std::pair<int32_t, int32_t>>{
           {DPL_DATASET_SPLIT_TRAIN, DPL_DATASET_SPLIT_TRAIN},
           {DPL_DATASET_SPLIT_TEST, DPL_DATASET_SPLIT_TEST},
           {DPL_DATASET_SPLIT_VALIDATION, DPL_DATASET_SPLIT_TEST}}) {
    const dpl_dataset_config config = NewestConfig(asked);
    ASSERT_EQ(dataset.create(&config, &instance), DPL_OK);
    EXPECT_EQ(CreatedWith().split, given) << "asked for split " << asked;
  }
}

TEST(DatasetV1Adapter, RequiresEveryEntry) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 1);
  EXPECT_EQ(Names(adapter.required(nullptr)), RequiredNames());
  dpl_dataset_plugin_v1 table = Table();
  table.fill = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"fill"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
