// The nccl engine's part of backend ABI v4's abort (Note [Abort from another thread] in
// plugins/nccl/collective_engine.hpp), with the fakes of nccl_engine_fakes.hpp: the request only
// sets a flag, and the thread that polls aborts the communicator at its next look.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nccl_engine_fakes.hpp"

namespace {

using namespace dpl::nccl::testing;
using namespace std::chrono_literals;
using NcclEngineAbort = NcclEngineTest;

// A synchronize waiting for an allreduce a peer never joins; another thread asks for the abort
// while it waits (here: at the engine's tenth pause).
TEST_F(NcclEngineAbort, EndsAWaitAtItsNextPollAndAbortsTheCommunicatorThere) {
  queue_.queries_until_reached = FakeQueue::kNever;
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  waiter_.on_pause = [this](int round) {
    if (round == 9) engine_.RequestAbort();
  };
  EXPECT_EQ(Call([&] { engine_.Synchronize(kComputeStream); }),
            (Outcome{DPL_ERR_COMMUNICATION,
                     "nccl: rank 1 of 2: the host aborted this instance (abort) during "
                     "synchronize, waiting for allreduce #1 (sum of 1024 float32); the NCCL "
                     "communicator was aborted"}));
  EXPECT_EQ(waiter_.Elapsed(), 10ms) << "the next poll ends the wait, not the 2500 ms timeout";
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
  EXPECT_EQ(std::count(queue_.log.begin(), queue_.log.end(), "compute waits for own"), 0)
      << "the caller's stream must not be made to wait for an aborted collective";
  EXPECT_EQ(Allreduce().status, DPL_ERR_COMMUNICATION);
  EXPECT_EQ(launches_, 1) << "nothing may reach NCCL after the abort";
  engine_.Shutdown();
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

// An enqueue that NCCL answered "in progress" is polled too, and ends the same way.
TEST_F(NcclEngineAbort, EndsAnEnqueueStuckInProgress) {
  communicator_.pending_polls = FakeCommunicator::kNever;
  waiter_.on_pause = [this](int round) {
    if (round == 4) engine_.RequestAbort();
  };
  const Outcome ended = Allreduce(Progress::Pending());
  EXPECT_EQ(ended.status, DPL_ERR_COMMUNICATION) << ended;
  EXPECT_NE(ended.message.find("the host aborted this instance (abort) during the enqueuing of "
                               "allreduce #1"),
            std::string::npos)
      << ended;
  EXPECT_EQ(waiter_.Elapsed(), 5ms);
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
}

// With no call under way, the next call aborts the communicator and fails at once.
TEST_F(NcclEngineAbort, WithNoCallUnderWayTheNextCallAbortsAtOnce) {
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  engine_.RequestAbort();
  EXPECT_TRUE(communicator_.calls.empty()) << "the requesting thread touches no NCCL state";
  EXPECT_EQ(Call([&] { engine_.AwaitAll("barrier"); }).status, DPL_ERR_COMMUNICATION);
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
  EXPECT_EQ(waiter_.Elapsed(), 0ms);
}

// Destroy after the request aborts the communicator instead of finalizing it, which would wait
// for the peers.
TEST_F(NcclEngineAbort, ShutdownAfterARequestAbortsWithoutFinalizing) {
  ASSERT_EQ(Allreduce(), (Outcome{DPL_OK, ""}));
  engine_.RequestAbort();
  engine_.Shutdown();
  EXPECT_EQ(communicator_.calls, (std::vector<std::string>{"abort"}));
  EXPECT_EQ(waiter_.Elapsed(), 0ms);
  EXPECT_TRUE(logged_.empty());
}

}  // namespace
