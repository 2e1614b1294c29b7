// The fixture of the tests of what runs over the store (the join, elastic membership, the
// workers' reports): a store server on 127.0.0.1 for each test, and clients of it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "rendezvous/store.hpp"

namespace dpl::rendezvous::testing {

class LoopbackStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreServerOptions options;
    options.bind_addr = "127.0.0.1";
    auto server = StoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }
  StoreClientOptions ClientOptions() const {
    StoreClientOptions options;
    options.host = "127.0.0.1";
    options.port = server_->port();
    options.connect_timeout = std::chrono::seconds(5);
    return options;
  }
  std::unique_ptr<StoreClient> Connect() const {
    auto client = StoreClient::Connect(ClientOptions());
    EXPECT_TRUE(client.ok()) << client.status().message();
    return client.ok() ? std::move(*client) : nullptr;
  }
  std::unique_ptr<StoreServer> server_;
};

}  // namespace dpl::rendezvous::testing
