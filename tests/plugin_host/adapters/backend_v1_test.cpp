// The adapter of backend ABI v1 (plugin_host/adapters/backend_v1.cpp).
#include "adapters/fake_tables.hpp"

namespace dpl::plugin_host::testing {
namespace {

dpl_backend_config_v1 created_with;

dpl_status Create(const dpl_backend_config_v1* config, dpl_backend** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_backend_plugin_v1 Table() {
  dpl_backend_plugin_v1 table{};
  table.header = Header(DPL_PLUGIN_KIND_BACKEND, 1, sizeof table);
  table.create = Create;
  backend_v1::Fill(&table);
  return table;
}

TEST(BackendV1Adapter, SynchronizesAtOnce) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 1);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_backend_plugin_v1));
  const dpl_backend_plugin_v1 table = Table();
  const BackendInterface backend = AdaptTable<BackendInterface>(adapter, &table);
  EXPECT_EQ(backend.abi, "backend ABI v1");
  EXPECT_FALSE(backend.Has(BackendCapability::kSynchronize));
  EXPECT_FALSE(backend.Has(BackendCapability::kLocalAddress));
  backend_v1::ExpectEntriesReachTheTable(backend);
  Calls().clear();
  EXPECT_EQ(backend.synchronize(nullptr, nullptr), DPL_OK);
  EXPECT_EQ(Calls(), std::vector<std::string>{});  // nothing of the plugin's to call
}

TEST(BackendV1Adapter, CreateGetsTheV1PrefixOfTheConfig) {
  const dpl_backend_plugin_v1 table = Table();
  const BackendInterface backend =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 1), &table);
  const dpl_backend_config config = backend_v1::NewestConfig();
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_backend_config_v1));
  EXPECT_EQ(created_with.version, 1u);
  backend_v1::ExpectV1Fields(created_with);
}

TEST(BackendV1Adapter, RequiresEveryV1Entry) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 1);
  EXPECT_EQ(Names(adapter.required(nullptr)), backend_v1::RequiredNames());
  dpl_backend_plugin_v1 table = Table();
  table.create = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"create"});
}

TEST(BackendV1Adapter, MakesReduceScatterAndInPlaceAllgatherOfItsCollectives) {
  dpl_backend_plugin_v1 table = Table();
  backend_v1::FillCollectiveFakes(&table);
  backend_v1::ExpectCollectivesOfV3(
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 1), &table));
}

}  // namespace
}  // namespace dpl::plugin_host::testing
