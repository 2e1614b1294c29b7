// The nccl backend's ordering, watchdog and setup checks without a GPU: the engine of
// plugins/nccl driven through fakes of its device queue, communicator and clock
// (nccl_engine_fakes.hpp).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "file_store.hpp"
#include "nccl_engine_fakes.hpp"
#include "setup_checks.hpp"

namespace {

using namespace dpl::nccl::testing;
using namespace std::chrono_literals;

TEST_F(NcclEngineTest, CollectivesRunOnTheOwnStreamAfterTheCallersWork) {
  queue_.queries_until_reached = FakeQueue::kNever;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(queue_.log,
            (std::vector<std::string>{"own waits for compute", "allreduce on own", "mark 1",
                                      "own waits for compute", "allreduce on own", "mark 2"}));
  EXPECT_EQ(engine_.in_flight(), 2u);
  EXPECT_EQ(waiter_.Elapsed(), 0ms) << "issuing must not wait for the device";
}

TEST_F(NcclEngineTest, SynchronizeOrdersTheCallerAfterEveryIssuedCollective) {
  queue_.queries_until_reached = 40;  // the device needs a while for each
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  ASSERT_EQ(Call([&] { engine_.Synchronize(kOptimizerStream); }), (Outcome{DPL_OK, ""}));
  // Every collective was reached before the optimizer's stream was made to wait, and only then.
  const auto& log = queue_.log;
  const auto order = std::find(log.begin(), log.end(), "optimizer waits for own");
  ASSERT_NE(order, log.end());
  EXPECT_EQ(order, log.end() - 1);
  for (const std::string reached : {"reached 1", "reached 2", "reached 3"}) {
    EXPECT_LT(std::find(log.begin(), log.end(), reached), order) << reached;
  }
  EXPECT_EQ(queue_.released, (std::vector<DeviceQueue::Marker>{1, 2, 3}));
  EXPECT_EQ(engine_.in_flight(), 0u);
  EXPECT_GE(waiter_.Elapsed(), 40ms) << "synchronize returned before the device was done";
  EXPECT_TRUE(communicator_.calls.empty());
}

TEST_F(NcclEngineTest, FinishedCollectivesAreReapedWhenTheNextIsIssued) {
  queue_.queries_until_reached = 0;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(engine_.in_flight(), 1u);
  EXPECT_EQ(queue_.released, (std::vector<DeviceQueue::Marker>{1, 2, 3, 4}));
}

TEST_F(NcclEngineTest, HungCollectiveIsAbortedAfterTheTimeoutNamingItAndTheRank) {
  queue_.queries_until_reached = FakeQueue::kNever;  // a peer never joins the allreduce
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }),
            (Outcome{DPL_ERR_TIMEOUT,
                     "nccl: rank 1 of 2: allreduce #1 (sum of 1024 float32) did not finish within "
                     "2500 ms (--backend-timeout) (waited in synchronize): a peer is dead, stuck, "
                     "or called other collectives; the NCCL communicator was aborted"}));
  EXPECT_EQ(waiter_.Elapsed(), 2500ms);
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
  EXPECT_TRUE(engine_.aborted());
  EXPECT_EQ(std::count(queue_.log.begin(), queue_.log.end(), "compute waits for own"), 0)
      << "the caller's stream must not be made to wait for an aborted collective";
  EXPECT_EQ(queue_.released, (std::vector<DeviceQueue::Marker>{1}));
}

TEST_F(NcclEngineTest, AsyncErrorIsACommunicationErrorAndAborts) {
  queue_.queries_until_reached = FakeQueue::kNever;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  communicator_.async_error_at_poll = communicator_.polls + 30;  // a peer dies 30 polls later
  EXPECT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }),
            (Outcome{DPL_ERR_COMMUNICATION,
                     "nccl: rank 1 of 2: NCCL reported an error while allreduce #1 (sum of 1024 "
                     "float32) was in flight: remote process exited or there was a network "
                     "error; the NCCL communicator was aborted"}));
  EXPECT_LT(waiter_.Elapsed(), 2500ms) << "an asynchronous error must not wait for the timeout";
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, EveryCallAfterAnAbortFailsAtOnce) {
  queue_.queries_until_reached = FakeQueue::kNever;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  ASSERT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }).status, DPL_ERR_TIMEOUT);
  const auto aborted_at = waiter_.Elapsed();
  const size_t logged = queue_.log.size();
  const Outcome refused{DPL_ERR_COMMUNICATION,
                        "nccl: rank 1 of 2: the NCCL communicator was aborted after an earlier "
                        "failure (allreduce #1 (sum of 1024 float32) did not finish within 2500 ms "
                        "(--backend-timeout) (waited in synchronize): a peer is dead, stuck, or "
                        "called other collectives); this backend instance cannot be used again: "
                        "restart the job (--max-restarts)"};
  EXPECT_EQ(Allreduce(), refused);
  EXPECT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }), refused);
  EXPECT_EQ(Call([&] { engine_.AwaitAll("barrier"); }), refused);
  EXPECT_EQ(Call([&] { engine_.CheckUsable(); }), refused);
  EXPECT_EQ(launches_, 1) << "nothing may reach NCCL after the abort";
  EXPECT_EQ(queue_.log.size(), logged) << "nothing may reach the device after the abort";
  EXPECT_EQ(waiter_.Elapsed(), aborted_at) << "refusals must not wait";
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, DestroyAfterAnErrorAbortsInsteadOfDestroying) {
  queue_.queries_until_reached = FakeQueue::kNever;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  communicator_.async_error_at_poll = communicator_.polls + 1;
  ASSERT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }).status, DPL_ERR_COMMUNICATION);
  engine_.Shutdown();
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}))
      << "ncclCommAbort frees the communicator: no finalize, no destroy";
}

TEST_F(NcclEngineTest, ShutdownFinalizesThenDestroys) {
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  communicator_.finalize_pending_polls = 25;  // the peers take a while to be quiescent
  engine_.Shutdown();
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"finalize", "destroy"}));
  EXPECT_EQ(waiter_.Elapsed(), 25ms);
  EXPECT_TRUE(logged_.empty());
}

TEST_F(NcclEngineTest, ShutdownThatDoesNotFinalizeInTimeAborts) {
  communicator_.finalize_pending_polls = FakeCommunicator::kNever;  // a peer is gone
  engine_.Shutdown();
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"finalize", "abort"}));
  EXPECT_EQ(waiter_.Elapsed(), 2500ms);
  EXPECT_EQ(logged_, (std::vector<std::string>{
                         "2 rank 1 of 2: the NCCL communicator was aborted at shutdown: finalizing "
                         "it did not finish within 2500 ms (--backend-timeout)"}));
}

TEST_F(NcclEngineTest, SetupThatNeverCompletesTimesOut) {
  communicator_.pending_polls = FakeCommunicator::kNever;
  EXPECT_EQ(Call([&] { engine_.AwaitReady(Progress::Pending()); }),
            (Outcome{DPL_ERR_TIMEOUT,
                     "nccl: rank 1 of 2: NCCL communicator setup did not finish within 2500 ms "
                     "(--backend-timeout): a peer did not join (see the other ranks' logs); the "
                     "NCCL communicator was aborted"}));
  EXPECT_EQ(waiter_.Elapsed(), 2500ms);
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, SetupIsPolledUntilReady) {
  communicator_.pending_polls = 12;
  EXPECT_EQ(Call([&] { engine_.AwaitReady(Progress::Pending()); }), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(waiter_.Elapsed(), 12ms);
  EXPECT_TRUE(communicator_.calls.empty());
}

TEST_F(NcclEngineTest, SetupThatFailsAtOnceAborts) {
  EXPECT_EQ(Call([&] {
              engine_.AwaitReady(Progress::Failed(DPL_ERR_COMMUNICATION, "unhandled system error"));
            }),
            (Outcome{DPL_ERR_COMMUNICATION,
                     "nccl: rank 1 of 2: NCCL communicator setup failed: unhandled system error; "
                     "the NCCL communicator was aborted"}));
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, AFailedLaunchAborts) {
  EXPECT_EQ(Allreduce(Progress::Failed(DPL_ERR_INTERNAL, "invalid usage")),
            (Outcome{DPL_ERR_INTERNAL,
                     "nccl: rank 1 of 2: allreduce #1 (sum of 1024 float32) could not be issued: "
                     "invalid usage; the NCCL communicator was aborted"}));
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, ALaunchInProgressIsPolledUntilEnqueued) {
  communicator_.pending_polls = 7;  // a non-blocking communicator answered ncclInProgress
  ASSERT_EQ(Allreduce(Progress::Pending()), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(waiter_.Elapsed(), 7ms);
  EXPECT_EQ(queue_.log.back(), "mark 1") << "watched only once enqueued";
}

TEST_F(NcclEngineTest, ALaunchStuckInProgressTimesOut) {
  communicator_.pending_polls = FakeCommunicator::kNever;
  EXPECT_EQ(Allreduce(Progress::Pending()),
            (Outcome{DPL_ERR_TIMEOUT,
                     "nccl: rank 1 of 2: allreduce #1 (sum of 1024 float32) was still being "
                     "enqueued after 2500 ms (--backend-timeout); the NCCL communicator was "
                     "aborted"}));
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, ADeviceErrorAborts) {
  queue_.fail_next_marker = true;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  EXPECT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }),
            (Outcome{DPL_ERR_INTERNAL,
                     "nccl: rank 1 of 2: the device failed while allreduce #1 (sum of 1024 "
                     "float32) was in flight: cudaErrorIllegalAddress; the NCCL communicator was "
                     "aborted"}));
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

TEST_F(NcclEngineTest, ABarrierWaitsForNoCallerStream) {
  queue_.queries_until_reached = 3;
  ASSERT_EQ(Call([&] {
              engine_.Issue("barrier", "allreduce of one int32", std::nullopt, [&](void* stream) {
                queue_.log.push_back("barrier on " + StreamName(stream));
                return Progress::Done();
              });
              engine_.AwaitAll("barrier");
            }),
            (Outcome{DPL_OK, ""}));
  EXPECT_EQ(queue_.log, (std::vector<std::string>{"barrier on own", "mark 1", "reached 1"}));
}

TEST_F(NcclEngineTest, TooManyCollectivesInFlightWaitForTheOldestWithinTheTimeout) {
  queue_.queries_until_reached = FakeQueue::kNever;
  for (size_t i = 0; i < CollectiveEngine::kMaxInFlight; ++i) {
    ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""})) << i;
  }
  EXPECT_EQ(waiter_.Elapsed(), 0ms);
  EXPECT_EQ(Allreduce().message,
            "nccl: rank 1 of 2: allreduce #1 (sum of 1024 float32) did not finish within 2500 ms "
            "(--backend-timeout) (waited in allreduce #4097 (sum of 1024 float32)): a peer is "
            "dead, stuck, or called other collectives; the NCCL communicator was aborted");
  EXPECT_EQ(launches_, static_cast<int>(CollectiveEngine::kMaxInFlight));
}

// --- setup checks ---

DLTensor Tensor(float* data, int64_t* shape, DLDeviceType type, int32_t device_id) {
  return DLTensor{data, {type, device_id}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
}

TEST(NcclSetupChecks, ATensorOnAnotherDeviceIsRefused) {
  float data[4] = {};
  int64_t shape = 4;
  EXPECT_EQ(Call([&] {
              dpl::nccl::CheckDeviceTensor(Tensor(data, &shape, kDLCUDA, 1), 0, "allreduce tensor");
            }),
            (Outcome{DPL_ERR_INVALID_ARGUMENT,
                     "nccl: allreduce tensor is on CUDA device 1 but this nccl backend runs on "
                     "device 0 (its config's device_id); pass the tensors of the rank's own "
                     "device"}));
  EXPECT_EQ(Call([&] {
              dpl::nccl::CheckDeviceTensor(Tensor(data, &shape, kDLCUDA, 3), 3, "allgather input");
            }),
            (Outcome{DPL_OK, ""}));
}

TEST(NcclSetupChecks, AHostTensorIsRefused) {
  float data[4] = {};
  int64_t shape = 4;
  EXPECT_EQ(Call([&] {
              dpl::nccl::CheckDeviceTensor(Tensor(data, &shape, kDLCPU, 0), 0, "broadcast tensor");
            }),
            (Outcome{DPL_ERR_UNSUPPORTED,
                     "nccl: broadcast tensor is not a CUDA tensor; the nccl backend moves kDLCUDA "
                     "tensors only (use --backend gloo for CPU)"}));
}

class UniqueIdExchange : public ::testing::Test {
 protected:
  UniqueIdExchange() {
    char directory[] = "/tmp/dpl_nccl_store_XXXXXX";
    directory_ = ::mkdtemp(directory);
    store_ = std::make_unique<dpl::testing::FileStore>(directory_);
  }
  ~UniqueIdExchange() override { std::system(("rm -rf " + directory_).c_str()); }

  void Put(size_t bytes) {
    const std::vector<char> value(bytes, 7);
    ASSERT_EQ(store().set(store().context, dpl::nccl::kUniqueIdKey, value.data(), bytes), DPL_OK);
  }
  Outcome Read(int64_t timeout_ms = 1000) {
    return Call([&] { dpl::nccl::ReadUniqueId(store(), timeout_ms, id_, sizeof(id_)); });
  }
  const dpl_store_v1& store() const { return *store_->view(); }

  std::string directory_;
  std::unique_ptr<dpl::testing::FileStore> store_;
  unsigned char id_[dpl::nccl::kUniqueIdBytes] = {};
};

TEST_F(UniqueIdExchange, AShortIdIsRefused) {
  Put(16);
  EXPECT_EQ(Read(), (Outcome{DPL_ERR_COMMUNICATION,
                             "nccl: the store key nccl/unique_id holds 16 bytes, not the 128 of an "
                             "NCCL unique id: it was not written by this job's rank 0 nccl backend "
                             "(another dpl version, or another job on the same store)"}));
}

TEST_F(UniqueIdExchange, ALongIdIsRefused) {
  Put(200);
  EXPECT_EQ(Read().message,
            "nccl: the store key nccl/unique_id holds 200 bytes, not the 128 of an NCCL unique "
            "id: it was not written by this job's rank 0 nccl backend (another dpl version, or "
            "another job on the same store)");
}

TEST_F(UniqueIdExchange, RankZerosIdArrivesWhole) {
  unsigned char published[dpl::nccl::kUniqueIdBytes];
  for (size_t i = 0; i < sizeof(published); ++i) published[i] = static_cast<unsigned char>(i * 3);
  ASSERT_EQ(Call([&] { dpl::nccl::PublishUniqueId(store(), published, sizeof(published)); }),
            (Outcome{DPL_OK, ""}));
  ASSERT_EQ(Read(), (Outcome{DPL_OK, ""}));
  EXPECT_TRUE(std::equal(std::begin(published), std::end(published), std::begin(id_)));
}

TEST_F(UniqueIdExchange, NoIdWithinTheTimeoutIsATimeout) {
  EXPECT_EQ(Read(50), (Outcome{DPL_ERR_TIMEOUT,
                               "nccl: no NCCL unique id from rank 0 under the store key "
                               "nccl/unique_id within 50 ms (--backend-timeout): rank 0's nccl "
                               "backend did not start (see its log)"}));
}

}  // namespace
