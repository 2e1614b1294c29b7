// The adapter of backend ABI v2 (plugin_host/adapters/backend_v2.cpp).
#include "dpl/backend_v2.h"
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_backend_config_v2 created_with;

dpl_status Create(const dpl_backend_config_v2* config, dpl_backend** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_status Synchronize(dpl_backend*, void*) {
  Called("synchronize");
  return DPL_ERR_TIMEOUT;
}

dpl_backend_plugin_v2 Table() {
  dpl_backend_plugin_v2 table{};
  table.header = Header(DPL_PLUGIN_KIND_BACKEND, 2, sizeof table);
  table.create = Create;
  backend_v1::Fill(&table);
  table.synchronize = Synchronize;
  return table;
}

TEST(BackendV2Adapter, SynchronizeIsThePlugins) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 2);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_backend_plugin_v2));
  const dpl_backend_plugin_v2 table = Table();
  const BackendInterface backend = AdaptTable<BackendInterface>(adapter, &table);
  EXPECT_EQ(backend.abi, "backend ABI v2");
  EXPECT_TRUE(backend.Has(BackendCapability::kSynchronize));
  EXPECT_TRUE(backend.Has(BackendCapability::kLocalAddress));
  backend_v1::ExpectEntriesReachTheTable(backend);
  Calls().clear();
  EXPECT_EQ(backend.synchronize(nullptr, nullptr), DPL_ERR_TIMEOUT);
  EXPECT_EQ(Calls(), std::vector<std::string>{"synchronize"});
}

TEST(BackendV2Adapter, CreateGetsTheWholeConfig) {
  const dpl_backend_plugin_v2 table = Table();
  const BackendInterface backend =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 2), &table);
  dpl_backend_config config = backend_v1::NewestConfig();
  config.version = 0;  // the adapter's to set
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_backend_config_v2));
  EXPECT_EQ(created_with.version, 2u);
  backend_v1::ExpectV1Fields(created_with);
  EXPECT_STREQ(created_with.local_address, "10.0.0.2");
}

TEST(BackendV2Adapter, RequiresSynchronizeLast) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 2);
  std::vector<std::string> names = backend_v1::RequiredNames();
  names.push_back("synchronize");
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_backend_plugin_v2 table = Table();
  table.synchronize = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"synchronize"});
}

TEST(BackendV2Adapter, MakesReduceScatterAndInPlaceAllgatherOfItsCollectives) {
  dpl_backend_plugin_v2 table = Table();
  backend_v1::FillCollectiveFakes(&table);
  backend_v1::ExpectCollectivesOfV3(
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 2), &table));
}

}  // namespace
}  // namespace dpl::plugin_host::testing
