// Note [A host path beside a device backend] (training/collectives/collectives.cpp): which backend
// needs one, and the host path a worker connects, with the backend plugins of host memory this
// build makes (gloo, tcp: what --backend auto takes on the CPU), among two ranks as threads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "plugin_host/plugin_host.hpp"
#include "rendezvous/store.hpp"
#include "training/collectives/backend.hpp"
#include "training/collectives/backend_collectives.hpp"
#include "training/collectives/communication_thread.hpp"
#include "training/host_tensor.hpp"
#include "worker/backend_bootstrap.hpp"

namespace dpl::worker {
namespace {

using namespace std::chrono_literals;

// A backend instance of `device_type` whose plugin has abort or not; it is never called.
std::unique_ptr<training::Backend> UncalledBackend(int32_t device_type, bool can_abort) {
  auto table = std::make_shared<plugin_host::BackendInterface>();
  if (can_abort) {
    table->capabilities = {plugin_host::BackendCapability::kAbort};
    table->abort = [](dpl_backend*) { return DPL_OK; };
  }
  table->destroy = [](dpl_backend*) {};
  return std::make_unique<training::Backend>(table, nullptr, PluginLabel{"backend", "uncalled", ""},
                                             device_type);
}

TEST(HostPath, IsNeededBesideADeviceBackendThatCanAbortOnly) {
  EXPECT_TRUE(NeedsHostPath(*UncalledBackend(kDLCUDA, /*can_abort=*/true)));
  EXPECT_FALSE(NeedsHostPath(*UncalledBackend(kDLCPU, /*can_abort=*/true)))
      << "a backend of host memory carries the state itself";
  EXPECT_FALSE(NeedsHostPath(*UncalledBackend(kDLCUDA, /*can_abort=*/false)))
      << "without abort the worker cannot go on in place anyway";
}

// Two ranks of a CUDA job connect the host path with the device backend's options (which the
// plugin of host memory would refuse as unknown), and sum host memory through it.
TEST(HostPath, ConnectsTheBackendOfHostMemoryAmongTheRanks) {
  rendezvous::StoreServerOptions server_options;
  server_options.bind_addr = "127.0.0.1";
  auto server = rendezvous::StoreServer::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status().message();
  auto discovery = plugin_host::DiscoverPlugins({DPL_TEST_PLUGIN_DIR});
  ASSERT_TRUE(discovery.ok()) << discovery.status().message();
  std::string reason;
  auto host = plugin_host::ChooseBackend(*discovery, "auto", "cpu", &reason);
  ASSERT_TRUE(host.ok()) << host.status().message();
  cli::Options options;
  options.backend_options = "only_the_device_backend_knows_this=1";
  options.backend_timeout = 30s;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      rendezvous::StoreClientOptions client_options;
      client_options.host = "127.0.0.1";
      client_options.port = (*server)->port();
      auto client = rendezvous::StoreClient::Connect(client_options);
      ASSERT_TRUE(client.ok()) << client.status().message();
      training::WorkerIdentity identity;
      identity.rank = rank;
      identity.world_size = 2;
      identity.device_type = kDLCUDA;
      ConnectedBackend connected;
      connected.plugin.name = "nccl";
      const Status started =
          StartHostPath(*host, options, identity, **client, "attempt/0/", &connected);
      ASSERT_TRUE(started.ok()) << started.message();
      ASSERT_NE(connected.host_path, nullptr);
      EXPECT_EQ(connected.host_path->device_type(), kDLCPU);
      EXPECT_TRUE(connected.host_path->CanAbort());
      training::CommunicationThread thread;
      training::BackendCollectives path(*connected.host_path, thread, rank, 2);
      std::vector<double> values = {double(rank) + 1.0};
      ASSERT_TRUE(path.SumScalars("sum", &values).ok());
      EXPECT_EQ(values, std::vector<double>{3.0});
    });
  }
  for (std::thread& rank : ranks) rank.join();
}

}  // namespace
}  // namespace dpl::worker
