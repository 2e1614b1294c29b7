// The adapter of dataset ABI v2 (plugin_host/adapters/dataset_v2.cpp).
#include <vector>

#include "adapters/fake_tables.hpp"
#include "dpl/dataset_v2.h"

namespace dpl::plugin_host::testing {
namespace {

dpl_dataset_config_v2 created_with;
void* fill_input = nullptr;
void* fill_target = nullptr;

dpl_status Create(const dpl_dataset_config_v2* config, dpl_dataset** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}
void Destroy(dpl_dataset*) {
  Called("destroy");
}
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
dpl_status Fill(dpl_dataset*, const int64_t*, int64_t, DLTensor* input, DLTensor* target) {
  fill_input = input->data;
  fill_target = target->data;
  return Called("fill");
}
const char* LastError() {
  Called("last_error");
  return "fake error";
}

dpl_dataset_plugin_v2 Table() {
  dpl_dataset_plugin_v2 table{};
  table.header = Header(DPL_PLUGIN_KIND_DATASET, 2, sizeof table);
  table.create = Create;
  table.destroy = Destroy;
  table.describe = Describe;
  table.fill = Fill;
  table.last_error = LastError;
  return table;
}

TEST(DatasetV2Adapter, EveryEntryReachesTheTable) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_DATASET, 2);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_dataset_plugin_v2));
  EXPECT_EQ(adapter.capabilities, 0u);
  const dpl_dataset_plugin_v2 table = Table();
  const DatasetInterface dataset = AdaptTable<DatasetInterface>(adapter, &table);
  EXPECT_EQ(dataset.abi, "dataset ABI v2");
  Calls().clear();
  const int64_t index = 0;
  int64_t input_values[16], target_values[16];
  DLTensor input{}, target{};
  input.data = input_values;
  target.data = target_values;
  dataset.destroy(nullptr);
  EXPECT_EQ(dataset.fill(nullptr, &index, 0, &input, &target), DPL_OK);
  EXPECT_EQ(fill_input, input_values);
  EXPECT_EQ(fill_target, target_values);
  EXPECT_STREQ(dataset.last_error(), "fake error");
  EXPECT_EQ(Calls(), (std::vector<std::string>{"destroy", "fill", "last_error"}));
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
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_dataset_config_v2));
  EXPECT_EQ(created_with.version, 2u);
  EXPECT_STREQ(created_with.path, "/data/tokens");
  EXPECT_STREQ(created_with.options, "block=16");
  EXPECT_EQ(created_with.split, DPL_DATASET_SPLIT_VALIDATION);  // v2 knows it
  EXPECT_EQ(created_with.num_threads, 3);
  EXPECT_STREQ(created_with.cache_dir, "/cache");
  EXPECT_EQ(created_with.seed, 11u);
  EXPECT_EQ(created_with.log_context, LogContext());
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
  EXPECT_EQ(Names(adapter.required(nullptr)),
            (std::vector<std::string>{"create", "destroy", "describe", "fill", "last_error"}));
  dpl_dataset_plugin_v2 table = Table();
  table.describe = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"describe"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
