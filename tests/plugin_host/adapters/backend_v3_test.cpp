// The adapter of backend ABI v3 (plugin_host/adapters/backend_v3.cpp).
#include "dpl/backend_v3.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_backend_config_v3 created_with;

dpl_status Create(const dpl_backend_config_v3* config, dpl_backend** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_status Synchronize(dpl_backend*, void*) {
  return Called("synchronize");
}

dpl_status ReduceScatter(dpl_backend*, DLTensor*, DLTensor*, dpl_reduce_op, void*) {
  Called("reduce_scatter");
  return DPL_ERR_COMMUNICATION;
}

dpl_backend_plugin_v3 Table() {
  dpl_backend_plugin_v3 table{};
  table.header = Header(DPL_PLUGIN_KIND_BACKEND, 3, sizeof table);
  table.create = Create;
  backend_v1::Fill(&table);
  table.synchronize = Synchronize;
  table.reduce_scatter = ReduceScatter;
  return table;
}

TEST(BackendV3Adapter, ReduceScatterAndAllgatherAreThePlugins) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 3);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_backend_plugin_v3));
  const dpl_backend_plugin_v3 table = Table();
  const BackendInterface backend = AdaptTable<BackendInterface>(adapter, &table);
  EXPECT_EQ(backend.abi, "backend ABI v3");
  EXPECT_TRUE(backend.Has(BackendCapability::kSynchronize));
  EXPECT_TRUE(backend.Has(BackendCapability::kLocalAddress));
  EXPECT_TRUE(backend.Has(BackendCapability::kReduceScatter));
  EXPECT_FALSE(backend.Has(BackendCapability::kAbort));
  backend_v1::ExpectEntriesReachTheTable(backend);
  Calls().clear();
  // Straight to the plugin, even in the overlapping form the adapters of v1 and v2 refuse: the
  // plugin checks its own arguments.
  float data[4] = {};
  int64_t four = 4, two = 2;
  DLTensor input = backend_v1::Floats(data, &four),
           overlapping = backend_v1::Floats(data + 1, &two);
  EXPECT_EQ(backend.reduce_scatter(nullptr, &input, &overlapping, DPL_REDUCE_SUM, nullptr),
            DPL_ERR_COMMUNICATION);
  EXPECT_EQ(backend.allgather(nullptr, &overlapping, &input, nullptr), DPL_OK);
  EXPECT_EQ(backend.synchronize(nullptr, nullptr), DPL_OK);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"reduce_scatter", "allgather", "synchronize"}));
}

TEST(BackendV3Adapter, CreateGetsTheWholeConfig) {
  const dpl_backend_plugin_v3 table = Table();
  const BackendInterface backend =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 3), &table);
  dpl_backend_config config = backend_v1::NewestConfig();
  config.version = 0;  // the adapter's to set
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_backend_config_v3));
  EXPECT_EQ(created_with.version, 3u);
  backend_v1::ExpectV1Fields(created_with);
  EXPECT_STREQ(created_with.local_address, "10.0.0.2");
}

TEST(BackendV3Adapter, RequiresReduceScatterLast) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 3);
  std::vector<std::string> names = backend_v1::RequiredNames();
  names.push_back("synchronize");
  names.push_back("reduce_scatter");
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_backend_plugin_v3 table = Table();
  table.reduce_scatter = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"reduce_scatter"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
