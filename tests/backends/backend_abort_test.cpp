// Backend ABI v4's abort (dpl/backend_v4.h) on the host backends. A job of two ranks, threads of
// this process over a file store: rank 0 enters an allreduce that rank 1 never joins (rank 1 stays
// connected and silent, as a peer stopped with SIGSTOP does), and another thread aborts rank 0's
// instance 200 ms later. The allreduce must return long before the backend's timeout, saying the
// instance was aborted; a later call must fail at once, and destroy must not wait for rank 1.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conformance_values.hpp"
#include "file_store.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using dpl::testing::FileStore;

// Far beyond every bound the tests check: only abort can end rank 0's wait in time.
constexpr int64_t kTimeoutMs = 30000;
constexpr int kRanks = 2;

std::chrono::milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

class BackendAbort : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!dpl::testing::values::plugin_built(GetParam())) {
      GTEST_SKIP() << GetParam() << " plugin not built";
    }
    std::signal(SIGPIPE, SIG_IGN);  // as the launcher's workers do (dpl/common.h)
    char pattern[] = "/tmp/dpl_backend_abort_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    directory_ = pattern;
    std::string error;
    plugin_ = dpl::testing::load_backend(dpl::testing::plugin_path(GetParam(), DPL_TEST_PLUGIN_DIR),
                                         &error);
    ASSERT_NE(plugin_, nullptr) << error;
    Connect();
  }
  void TearDown() override {
    for (dpl_backend* instance : instances_) {
      if (instance != nullptr) plugin_->destroy(instance);
    }
    if (!directory_.empty()) std::filesystem::remove_all(directory_);
  }

  // Creates both ranks' instances at once (each waits in create for the other).
  void Connect() {
    std::vector<dpl_status> created(kRanks, DPL_ERR_INTERNAL);
    std::vector<std::string> errors(kRanks);
    auto create = [&](int rank) {
      stores_[rank] = std::make_unique<FileStore>(directory_);
      dpl_backend_config_v5 config{};
      config.struct_size = sizeof(config);
      config.version = plugin_->header.abi_version;
      config.rank = rank;
      config.world_size = kRanks;
      config.local_rank = rank;
      config.local_world_size = kRanks;
      config.device_type = kDLCPU;
      config.timeout_ms = kTimeoutMs;
      config.store = stores_[rank]->view();
      config.options = "";
      config.local_address = "127.0.0.1";
      created[rank] = plugin_->create(&config, &instances_[rank]);
      if (created[rank] != DPL_OK) errors[rank] = plugin_->last_error();
    };
    std::thread other(create, 1);
    create(0);
    other.join();
    for (int rank = 0; rank < kRanks; ++rank) {
      ASSERT_EQ(created[rank], DPL_OK) << "rank " << rank << ": " << errors[rank];
    }
  }

  // An allreduce of rank 0 alone: rank 1 never joins it.
  dpl_status AllreduceAlone(std::string* error) {
    data_.assign(1u << 20, 1.0f);  // 4 MiB: more than the sockets buffer, so sends wait too
    int64_t shape = static_cast<int64_t>(data_.size());
    DLTensor tensor{data_.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
    const dpl_status status = plugin_->allreduce(instances_[0], &tensor, DPL_REDUCE_SUM, nullptr);
    *error = status == DPL_OK ? "" : plugin_->last_error();
    return status;
  }

  // Runs `call` of rank 0 alone while another thread aborts rank 0's instance after 200 ms: the
  // call must fail within 2 s (the backend timeout is 30 s), saying the instance was aborted.
  void ExpectAbortEnds(const char* what, const std::function<dpl_status()>& call) {
    dpl_status aborted = DPL_ERR_INTERNAL, again = DPL_ERR_INTERNAL;
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      aborted = plugin_->abort(instances_[0]);
      again = plugin_->abort(instances_[0]);  // idempotent
    });
    const auto start = Clock::now();
    const dpl_status status = call();
    const std::string error = status == DPL_OK ? "" : plugin_->last_error();
    const auto blocked = Since(start);
    aborter.join();
    EXPECT_EQ(aborted, DPL_OK);
    EXPECT_EQ(again, DPL_OK);
    EXPECT_EQ(status, DPL_ERR_COMMUNICATION) << what << ": " << error;
    EXPECT_NE(error.find("aborted"), std::string::npos) << what << ": " << error;
    EXPECT_GE(blocked, 150ms) << what << " ended before the abort: " << error;
    EXPECT_LT(blocked, 2s) << "the abort did not end the blocked " << what << " in time";
  }

  std::string directory_;
  const dpl_backend_plugin_v5* plugin_ = nullptr;
  std::unique_ptr<FileStore> stores_[kRanks];
  dpl_backend* instances_[kRanks] = {};
  std::vector<float> data_;
};

TEST_P(BackendAbort, EndsABlockedAllreduceFromAnotherThread) {
  std::string error;
  ExpectAbortEnds("allreduce", [&] { return AllreduceAlone(&error); });

  const auto later = Clock::now();
  const dpl_status then = AllreduceAlone(&error);
  EXPECT_EQ(then, DPL_ERR_COMMUNICATION) << error;
  EXPECT_NE(error.find("aborted"), std::string::npos) << error;
  EXPECT_LT(Since(later), 500ms) << "a call after the abort must fail at once";

  const auto destroying = Clock::now();
  plugin_->destroy(instances_[0]);
  instances_[0] = nullptr;
  EXPECT_LT(Since(destroying), 2s) << "destroy after abort must not wait on its peer";
}

// A barrier waits elsewhere than an allreduce (gloo: on its event-loop thread's pairs instead of
// the pairwise exchange's synchronous ones); abort ends it too.
TEST_P(BackendAbort, EndsABlockedBarrier) {
  ExpectAbortEnds("barrier", [&] { return plugin_->barrier(instances_[0]); });
}

// Backend ABI v5's send_receive waits on one peer's bytes; abort ends it too (tcp has no
// send_receive: backend ABI v4).
TEST_P(BackendAbort, EndsABlockedSendReceive) {
  if (plugin_->send_receive == nullptr) GTEST_SKIP() << GetParam() << " has no send_receive";
  data_.assign(1u << 20, 1.0f);
  std::vector<float> received(data_.size());
  int64_t shape = static_cast<int64_t>(data_.size());
  DLTensor send{data_.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
  DLTensor receive{received.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &shape, nullptr, 0};
  ExpectAbortEnds("send_receive", [&] {
    return plugin_->send_receive(instances_[0], &send, 1, &receive, 1, nullptr);
  });
  // As the host does with the peers of an aborted instance: rank 1 never took the call's slot, so
  // its teardown's barrier would take it and meet rank 0's bytes, sent before the abort.
  EXPECT_EQ(plugin_->abort(instances_[1]), DPL_OK);
}

// With no call under way, abort makes the next call (a barrier here) fail at once.
TEST_P(BackendAbort, MakesEveryLaterCallFailAtOnce) {
  ASSERT_EQ(plugin_->abort(instances_[0]), DPL_OK);
  const auto start = Clock::now();
  EXPECT_EQ(plugin_->barrier(instances_[0]), DPL_ERR_COMMUNICATION);
  const std::string error = plugin_->last_error();
  EXPECT_NE(error.find("aborted"), std::string::npos) << error;
  EXPECT_EQ(plugin_->synchronize(instances_[0], nullptr), DPL_ERR_COMMUNICATION);
  EXPECT_LT(Since(start), 500ms);
  EXPECT_EQ(plugin_->abort(nullptr), DPL_ERR_INVALID_ARGUMENT);
  const auto destroying = Clock::now();
  plugin_->destroy(instances_[0]);
  instances_[0] = nullptr;
  EXPECT_LT(Since(destroying), 2s);
}

INSTANTIATE_TEST_SUITE_P(HostBackends, BackendAbort, ::testing::Values("tcp", "gloo"),
                         [](const auto& info) { return info.param; });

}  // namespace
