// The adapter of backend ABI v4 (plugin_host/adapters/backend_v4.cpp), and what training::Backend
// makes of abort with it and without it (a v3 plugin).
#include "dpl/backend_v4.h"

#include <memory>

#include "adapters/fake_tables.hpp"
#include "dpl/backend_v3.h"
#include "training/collectives/backend.hpp"

namespace dpl::plugin_host::testing {
namespace {

using backend_v3::TableOf;
using backend_v3::TrainingBackend;

dpl_backend_config_v4 created_with;

dpl_status Create(const dpl_backend_config_v4* config, dpl_backend** out) {
  created_with = *config;
  *out = nullptr;
  return DPL_OK;
}

dpl_backend* aborted_instance = nullptr;

dpl_status Abort(dpl_backend* backend) {
  aborted_instance = backend;
  return Called("abort");
}

dpl_backend_plugin_v4 Table() {
  dpl_backend_plugin_v4 table = TableOf<dpl_backend_plugin_v4>(4);
  table.create = Create;
  table.abort = Abort;
  return table;
}

TEST(BackendV4Adapter, AbortIsThePlugins) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 4);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_backend_plugin_v4));
  const dpl_backend_plugin_v4 table = Table();
  const BackendInterface backend = AdaptTable<BackendInterface>(adapter, &table);
  EXPECT_EQ(backend.abi, "backend ABI v4");
  EXPECT_TRUE(backend.Has(BackendCapability::kSynchronize));
  EXPECT_TRUE(backend.Has(BackendCapability::kLocalAddress));
  EXPECT_TRUE(backend.Has(BackendCapability::kReduceScatter));
  EXPECT_TRUE(backend.Has(BackendCapability::kAbort));
  backend_v1::ExpectEntriesReachTheTable(backend);
  Calls().clear();
  ASSERT_TRUE(backend.abort);
  EXPECT_EQ(backend.abort(backend_v1::FakeHandle()), DPL_OK);
  EXPECT_EQ(backend.synchronize(nullptr, nullptr), DPL_OK);
  EXPECT_EQ(backend.reduce_scatter(nullptr, nullptr, nullptr, DPL_REDUCE_SUM, nullptr), DPL_OK);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"abort", "synchronize", "reduce_scatter"}));
  EXPECT_EQ(aborted_instance, backend_v1::FakeHandle());
}

TEST(BackendV4Adapter, CreateGetsTheWholeConfig) {
  const dpl_backend_plugin_v4 table = Table();
  const BackendInterface backend =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 4), &table);
  dpl_backend_config config = backend_v1::NewestConfig();
  config.version = 0;  // the adapter's to set
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_backend_config_v4));
  EXPECT_EQ(created_with.version, 4u);
  backend_v1::ExpectV1Fields(created_with);
  EXPECT_STREQ(created_with.local_address, "10.0.0.2");
}

// A v4 table without abort is a v4 plugin that lacks a required entry, not a v3 plugin.
TEST(BackendV4Adapter, RequiresAbortLast) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 4);
  std::vector<std::string> names = backend_v1::RequiredNames();
  names.insert(names.end(), {"synchronize", "reduce_scatter", "abort"});
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_backend_plugin_v4 table = Table();
  table.abort = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"abort"});
}

TEST(BackendV4Adapter, TheTrainingBackendAbortsThroughIt) {
  std::unique_ptr<training::Backend> backend = TrainingBackend(Table(), 4);
  EXPECT_TRUE(backend->CanAbort());
  Calls().clear();
  aborted_instance = nullptr;
  backend->Abort();
  EXPECT_EQ(aborted_instance, backend_v1::FakeHandle());
  backend.reset();
  EXPECT_EQ(Calls(), (std::vector<std::string>{"abort", "destroy"}));
}

// An older plugin has no abort: no capability, no entry, and the training's Abort calls nothing.
TEST(BackendV4Adapter, AV3PluginHasNoAbortAndTheTrainingBackendSkipsIt) {
  const dpl_backend_plugin_v3 table = TableOf<dpl_backend_plugin_v3>(3);
  const BackendInterface adapted =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 3), &table);
  EXPECT_FALSE(adapted.Has(BackendCapability::kAbort));
  EXPECT_FALSE(adapted.abort);
  std::unique_ptr<training::Backend> backend = TrainingBackend(table, 3);
  EXPECT_FALSE(backend->CanAbort());
  Calls().clear();
  EXPECT_NO_THROW(backend->Abort());
  EXPECT_EQ(Calls(), std::vector<std::string>{});
  backend.reset();
  EXPECT_EQ(Calls(), std::vector<std::string>{"destroy"});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
