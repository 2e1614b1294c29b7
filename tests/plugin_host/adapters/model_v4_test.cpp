// The adapter of model ABI v4 (plugin_host/adapters/model_v4.cpp).
#include "dpl/model_v4.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_model_config_v4 created_with;

dpl_status Create(const dpl_model_config_v4* config, dpl_model** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

// A language model's info: int64 (32) token ids, the next token per position.
dpl_status Describe(dpl_model*, dpl_model_info_v4* info) {
  EXPECT_EQ(info->struct_size, sizeof(dpl_model_info_v4));
  info->input_ndim = 1;
  info->input_shape[0] = 32;
  info->num_classes = 256;
  info->parameter_count = 9;
  info->input.dtype = DLDataType{kDLInt, 64, 1};
  info->input.ndim = 1;
  info->input.shape[0] = 32;
  info->target = info->input;
  return DPL_OK;
}

dpl_status EvalStep(dpl_model*, const DLTensor*, const DLTensor*, dpl_eval_result_v4* result) {
  EXPECT_EQ(result->struct_size, sizeof(dpl_eval_result_v4));
  result->loss_sum = 70.5;
  result->elements = 64;
  result->correct = 12;
  return Called("eval_step");
}

dpl_status SetOptimizer(dpl_model*, const dpl_optimizer_config_v4*) {
  return Called("set_optimizer");
}
dpl_status GradientStatistics(dpl_model*, dpl_gradient_statistics_v4*) {
  return Called("gradient_statistics");
}
dpl_status ApplyUpdate(dpl_model*, const dpl_update_v4*) {
  return Called("apply_update");
}

// Every entry of v3 and v4's eval_step; no device optimizer unless `device_optimizer`.
dpl_model_plugin_v4 Table(bool device_optimizer = false) {
  dpl_model_plugin_v4 table{};
  table.header = Header(DPL_PLUGIN_KIND_MODEL, 4, sizeof table);
  table.create = Create;
  table.describe = Describe;
  model_v1::Fill(&table);
  table.eval_step = EvalStep;
  model_v2::Fill(&table);
  model_v3::Fill(&table);
  if (device_optimizer) {
    table.set_optimizer = SetOptimizer;
    table.gradient_statistics = GradientStatistics;
    table.apply_update = ApplyUpdate;
  }
  return table;
}

TEST(ModelV4Adapter, HasEveryCapability) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 4);
  EXPECT_EQ(adapter.table_size, DPL_MODEL_PLUGIN_V4_FIRST_SIZE);
  const dpl_model_plugin_v4 table = Table();
  const ModelInterface model = AdaptTable<ModelInterface>(adapter, &table);
  EXPECT_EQ(model.abi, "model ABI v4");
  EXPECT_EQ(CapabilitiesOf(model).size(), AllModelCapabilities().size());
  model_v1::ExpectEntriesReachTheTable(model);
  model_v3::ExpectEntriesReachTheTable(model);
}

TEST(ModelV4Adapter, CreateGetsTheWholeConfig) {
  const dpl_model_plugin_v4 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 4), &table);
  dpl_model_config config = NewestModelConfig();
  config.version = 0;  // the adapter's to set
  dpl_model* instance = nullptr;
  ASSERT_EQ(model.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_model_config_v4));
  EXPECT_EQ(created_with.version, 4u);
  EXPECT_EQ(created_with.rank, 5);
  EXPECT_EQ(created_with.precision, DPL_PRECISION_BF16);
  EXPECT_EQ(created_with.input.dtype.code, kDLFloat);
  EXPECT_EQ(created_with.input.ndim, 3u);
  EXPECT_EQ(created_with.input.shape[2], 28);
  EXPECT_EQ(created_with.target.dtype.code, kDLInt);
  EXPECT_EQ(created_with.target.dtype.bits, 64);
  EXPECT_EQ(created_with.target.ndim, 0u);
}

TEST(ModelV4Adapter, DescribeAndEvalStepPassTypedSamplesThrough) {
  const dpl_model_plugin_v4 table = Table();
  const ModelInterface model =
      AdaptTable<ModelInterface>(AdapterOf(DPL_PLUGIN_KIND_MODEL, 4), &table);
  dpl_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(model.describe(nullptr, &info), DPL_OK);
  EXPECT_EQ(info.input.dtype.code, kDLInt);
  EXPECT_EQ(info.input.shape[0], 32);
  EXPECT_EQ(info.target.ndim, 1u);
  EXPECT_EQ(info.target.shape[0], 32);
  int64_t shape[2] = {2, 32};
  DLTensor batch{};
  batch.ndim = 2;
  batch.shape = shape;
  dpl_eval_result result{};
  result.struct_size = sizeof result;
  ASSERT_EQ(model.eval_step(nullptr, &batch, &batch, &result), DPL_OK);
  EXPECT_EQ(result.loss_sum, 70.5);
  EXPECT_EQ(result.elements, 64);  // the plugin's count, not the samples
  EXPECT_EQ(result.correct, 12);
}

TEST(ModelV4Adapter, TakesTheDeviceOptimizerWhereThePluginHasIt) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 4);
  const dpl_model_plugin_v4 without = Table();
  const ModelInterface host_optimizer = AdaptTable<ModelInterface>(adapter, &without);
  EXPECT_FALSE(host_optimizer.set_optimizer || host_optimizer.gradient_statistics ||
               host_optimizer.apply_update);
  const dpl_model_plugin_v4 with = Table(/*device_optimizer=*/true);
  const ModelInterface device_optimizer = AdaptTable<ModelInterface>(adapter, &with);
  Calls().clear();
  dpl_optimizer_config optimizer{};
  dpl_gradient_statistics statistics{};
  dpl_update update{};
  EXPECT_EQ(device_optimizer.set_optimizer(nullptr, &optimizer), DPL_OK);
  EXPECT_EQ(device_optimizer.gradient_statistics(nullptr, &statistics), DPL_OK);
  EXPECT_EQ(device_optimizer.apply_update(nullptr, &update), DPL_OK);
  EXPECT_EQ(Calls(),
            (std::vector<std::string>{"set_optimizer", "gradient_statistics", "apply_update"}));
}

dpl_status ShareParameters(dpl_model*, float*, uint64_t) {
  return Called("share_parameters");
}
dpl_status ShareGradients(dpl_model*, float*, uint64_t) {
  return Called("share_gradients");
}

// share_parameters and share_gradients came to v4 later: a table of v4's first size ends before
// them, so the adapter reads no slot past the table's end.
TEST(ModelV4Adapter, TakesTheSharingEntriesOnlyFromATableThatReachesThem) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 4);
  dpl_model_plugin_v4 first = Table();
  first.header.struct_size = DPL_MODEL_PLUGIN_V4_FIRST_SIZE;
  first.share_parameters = ShareParameters;  // past its end: what an older plugin's memory holds
  first.share_gradients = ShareGradients;
  const ModelInterface older = AdaptTable<ModelInterface>(adapter, &first);
  EXPECT_FALSE(older.share_parameters || older.share_gradients);
  dpl_model_plugin_v4 whole = Table();
  const ModelInterface without = AdaptTable<ModelInterface>(adapter, &whole);
  EXPECT_FALSE(without.share_parameters || without.share_gradients);
  whole.share_parameters = ShareParameters;
  whole.share_gradients = ShareGradients;
  const ModelInterface model = AdaptTable<ModelInterface>(adapter, &whole);
  Calls().clear();
  ASSERT_TRUE(model.share_parameters && model.share_gradients);
  EXPECT_EQ(model.share_parameters(nullptr, nullptr, 0), DPL_OK);
  EXPECT_EQ(model.share_gradients(nullptr, nullptr, 0), DPL_OK);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"share_parameters", "share_gradients"}));
}

TEST(ModelV4Adapter, RequiresV3sEntriesAndNotTheDeviceOptimizer) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_MODEL, 4);
  EXPECT_EQ(Names(adapter.required(nullptr)),
            Names(AdapterOf(DPL_PLUGIN_KIND_MODEL, 3).required(nullptr)));
  dpl_model_plugin_v4 table = Table();
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{});
  table.eval_step = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"eval_step"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
