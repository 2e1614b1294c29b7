// The adapter of backend ABI v5 (plugin_host/adapters/backend_v5.cpp), and what training::Backend
// makes of send_receive with it and without it (a v4 plugin).
#include "dpl/backend_v5.h"

#include <memory>

#include "adapters/fake_tables.hpp"
#include "dpl/backend_v4.h"
#include "training/collectives/backend.hpp"

namespace dpl::plugin_host::testing {
namespace {

using backend_v3::TableOf;
using backend_v3::TrainingBackend;

struct SentAndReceived {
  const DLTensor* send = nullptr;
  int32_t to = 0;
  DLTensor* receive = nullptr;
  int32_t from = 0;
};
SentAndReceived last_exchange;

dpl_status SendReceive(dpl_backend*, const DLTensor* send, int32_t to, DLTensor* receive,
                       int32_t from, void*) {
  last_exchange = {send, to, receive, from};
  return Called("send_receive");
}

dpl_status Abort(dpl_backend*) {
  return Called("abort");
}

dpl_backend_plugin_v5 Table() {
  dpl_backend_plugin_v5 table = TableOf<dpl_backend_plugin_v5>(5);
  table.abort = Abort;
  table.send_receive = SendReceive;
  return table;
}

TEST(BackendV5Adapter, SendReceiveIsThePlugins) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 5);
  EXPECT_EQ(adapter.table_size, sizeof(dpl_backend_plugin_v5));
  const dpl_backend_plugin_v5 table = Table();
  const BackendInterface backend = AdaptTable<BackendInterface>(adapter, &table);
  EXPECT_EQ(backend.abi, "backend ABI v5");
  for (BackendCapability capability :
       {BackendCapability::kSynchronize, BackendCapability::kLocalAddress,
        BackendCapability::kReduceScatter, BackendCapability::kAbort,
        BackendCapability::kSendReceive}) {
    EXPECT_TRUE(backend.Has(capability)) << int(capability);
  }
  backend_v1::ExpectEntriesReachTheTable(backend);
  Calls().clear();
  ASSERT_TRUE(backend.send_receive);
  DLTensor send{}, receive{};
  EXPECT_EQ(backend.send_receive(backend_v1::FakeHandle(), &send, 2, &receive, 1, nullptr), DPL_OK);
  EXPECT_EQ(backend.abort(backend_v1::FakeHandle()), DPL_OK);
  EXPECT_EQ(Calls(), (std::vector<std::string>{"send_receive", "abort"}));
  EXPECT_EQ(last_exchange.send, &send);
  EXPECT_EQ(last_exchange.to, 2);
  EXPECT_EQ(last_exchange.receive, &receive);
  EXPECT_EQ(last_exchange.from, 1);
}

TEST(BackendV5Adapter, CreateGetsTheWholeConfigAsVersion5) {
  dpl_backend_plugin_v5 table = Table();
  static dpl_backend_config_v5 created_with;
  table.create = [](const dpl_backend_config_v5* config, dpl_backend** out) {
    created_with = *config;
    *out = nullptr;
    return DPL_OK;
  };
  const BackendInterface backend =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 5), &table);
  dpl_backend_config config = backend_v1::NewestConfig();
  config.version = 0;  // the adapter's to set
  dpl_backend* instance = nullptr;
  ASSERT_EQ(backend.create(&config, &instance), DPL_OK);
  EXPECT_EQ(created_with.struct_size, sizeof(dpl_backend_config_v5));
  EXPECT_EQ(created_with.version, 5u);
  backend_v1::ExpectV1Fields(created_with);
}

// A v5 table without send_receive is a v5 plugin that lacks a required entry, not a v4 plugin.
TEST(BackendV5Adapter, RequiresSendReceiveLast) {
  const Adapter& adapter = AdapterOf(DPL_PLUGIN_KIND_BACKEND, 5);
  std::vector<std::string> names = backend_v1::RequiredNames();
  names.insert(names.end(), {"synchronize", "reduce_scatter", "abort", "send_receive"});
  EXPECT_EQ(Names(adapter.required(nullptr)), names);
  dpl_backend_plugin_v5 table = Table();
  table.send_receive = nullptr;
  EXPECT_EQ(Unset(adapter.required(&table)), std::vector<std::string>{"send_receive"});
}

TEST(BackendV5Adapter, TheTrainingBackendSendsThroughIt) {
  std::unique_ptr<training::Backend> backend = TrainingBackend(Table(), 5);
  EXPECT_TRUE(backend->CanSendReceive());
  Calls().clear();
  DLTensor receive{};
  EXPECT_TRUE(backend->SendReceive(nullptr, -1, &receive, 3, nullptr).ok());
  EXPECT_EQ(last_exchange.send, nullptr);
  EXPECT_EQ(last_exchange.to, -1);
  EXPECT_EQ(last_exchange.receive, &receive);
  EXPECT_EQ(last_exchange.from, 3);
  EXPECT_EQ(Calls(), std::vector<std::string>{"send_receive"});
}

// An older plugin has none: no capability, no entry, and the training's SendReceive refuses
// (its callers ask CanSendReceive first and move the bytes by an allgather instead).
TEST(BackendV5Adapter, AV4PluginHasNoSendReceive) {
  dpl_backend_plugin_v4 table = TableOf<dpl_backend_plugin_v4>(4);
  table.abort = Abort;
  const BackendInterface adapted =
      AdaptTable<BackendInterface>(AdapterOf(DPL_PLUGIN_KIND_BACKEND, 4), &table);
  EXPECT_FALSE(adapted.Has(BackendCapability::kSendReceive));
  EXPECT_FALSE(adapted.send_receive);
  std::unique_ptr<training::Backend> backend = TrainingBackend(table, 4);
  EXPECT_FALSE(backend->CanSendReceive());
  Calls().clear();
  const Status refused = backend->SendReceive(nullptr, -1, nullptr, -1, nullptr);
  EXPECT_EQ(refused.code(), DPL_ERR_UNSUPPORTED);
  EXPECT_NE(refused.message().find("has no send_receive (backend ABI v5)"), std::string::npos)
      << refused.message();
  EXPECT_EQ(Calls(), std::vector<std::string>{});
}

}  // namespace
}  // namespace dpl::plugin_host::testing
