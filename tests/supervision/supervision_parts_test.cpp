// The supervisor's parts on real pipes and processes: the line relay it shares with the hostfile
// runner, the names it gives a worker's end and a vanished machine, and the stall picture once a
// machine is known gone.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <deque>
#include <string>
#include <vector>

#include "observability/stall_report.hpp"
#include "supervision/failure_naming.hpp"
#include "supervision/line_relay.hpp"
#include "support/child_status.hpp"

namespace dpl::supervision {
namespace {

using namespace std::chrono_literals;

// A pipe whose read end goes to a relay.
struct Pipe {
  int read_fd = -1;
  int write_fd = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  void Write(const std::string& text) const {
    ASSERT_EQ(write(write_fd, text.data(), text.size()), ssize_t(text.size()));
  }
  void Close() {
    if (write_fd >= 0) close(write_fd);
    write_fd = -1;
  }
  ~Pipe() { Close(); }
};

TEST(LineRelay, HandsOnWholeLinesOfEachSource) {
  Pipe a, b;
  std::vector<std::string> from_a, from_b;
  LineRelay relay;
  EXPECT_EQ(relay.Add(a.read_fd, [&](std::string line) { from_a.push_back(line); }), 0u);
  EXPECT_EQ(relay.Add(b.read_fd, [&](std::string line) { from_b.push_back(line); }), 1u);
  a.Write("first\nsec");
  b.Write("other\n");
  EXPECT_TRUE(relay.Pump(100ms));
  EXPECT_EQ(from_a, std::vector<std::string>{"first"});
  EXPECT_EQ(from_b, std::vector<std::string>{"other"});
  a.Write("ond\nthird");  // the rest of a line, then one without its newline
  a.Close();
  while (relay.AnyOpen() && from_a.size() < 3) relay.Pump(100ms);
  EXPECT_EQ(from_a, (std::vector<std::string>{"first", "second", "third"}));
  EXPECT_TRUE(relay.AnyOpen());  // b has not ended
  b.Close();
  while (relay.AnyOpen()) relay.Pump(100ms);
  EXPECT_EQ(from_b, std::vector<std::string>{"other"});
  EXPECT_FALSE(relay.Pump(100ms));  // nothing left to wait for
}

TEST(LineRelay, DrainsOneSourceWithoutWaiting) {
  Pipe a, b;
  std::vector<std::string> lines;
  LineRelay relay;
  relay.Add(a.read_fd, [&](std::string line) { lines.push_back("a " + line); });
  const size_t second =
      relay.Add(b.read_fd, [&](std::string line) { lines.push_back("b " + line); });
  a.Write("not yet\n");
  b.Write("one\ntwo\nlast words");
  b.Close();
  const auto start = std::chrono::steady_clock::now();
  relay.Drain(second);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(lines, (std::vector<std::string>{"b one", "b two", "b last words"}));
  relay.Drain(second);  // an ended source gives nothing more
  EXPECT_EQ(lines.size(), 3u);
}

using testing::StatusOfChild;

TEST(FailureNaming, SaysHowAWorkerEnded) {
  EXPECT_EQ(DescribeExit(StatusOfChild(1, 0)), "exit code 1");
  EXPECT_EQ(DescribeExit(StatusOfChild(3, 0)),
            "exit code 3 (it lost a peer or the rendezvous store)");
  EXPECT_EQ(DescribeExit(StatusOfChild(0, SIGKILL)), "killed by signal 9 (SIGKILL)");
}

TEST(FailureNaming, NamesTheWorkerAndItsLastLines) {
  const std::deque<std::string> lines = {"[rank 3] epoch 0", "[rank 3] error: out of memory"};
  EndedWorker worker;
  worker.rank = 3;
  worker.machine = 1;
  worker.local_rank = 1;
  worker.pid = 42;
  worker.wait_status = StatusOfChild(1, 0);
  worker.last_lines = &lines;
  EXPECT_EQ(DescribeFailure(worker, FailureRole::kRootCause),
            "rank 3 (machine 1, local rank 1, pid 42) failed first: exit code 1; the last lines of "
            "its log (the root cause):\n    [rank 3] epoch 0\n    [rank 3] error: out of memory");
  worker.last_lines = nullptr;
  const std::string after = DescribeFailure(worker, FailureRole::kAfterPeer);
  EXPECT_EQ(after,
            "rank 3 (machine 1, local rank 1, pid 42) failed: exit code 1; it wrote no output");
  EXPECT_EQ(DescribeVanished({2, 4}, after),
            "machines 2, 4 vanished: their launchers stopped answering (no heartbeat in the "
            "rendezvous store for 1500 ms: killed, or the machine or the network to it is down); "
            "after them, " +
                after);
}

// Note [Lost machines] in heartbeat.hpp: the machine a launcher found vanished is named, with how
// long it was silent, and its ranks are gone in the stall picture rather than "never arrived".
TEST(LostMachines, AreNamedInTheFailureAndAsGoneInTheStallPicture) {
  EXPECT_EQ(DescribeLost({2}),
            "machine 2 vanished: its launcher stopped answering (no heartbeat in the rendezvous "
            "store for 3000 ms: killed, or the machine or the network to it is down); the attempt "
            "ends on every machine, its workers' collectives abandoned");
  const int64_t now = 1700000010000;
  const std::string waiting =
      observability::EncodeStallPost({now - 4000, 7, "allreduce of bucket 1 of 1 (40 B)"});
  const std::vector<std::string> board = {waiting, waiting, "", "", ""};
  EXPECT_EQ(observability::DescribeStalls(board, now, {{1, {2, 3}}}),
            "ranks 0-1 wait in step 7, allreduce of bucket 1 of 1 (40 B), for 4 s; ranks 2-3 are "
            "gone with machine 1 (its launcher vanished); rank 4 never arrived (no blocked call "
            "reported: stopped, still computing, or elsewhere)");
  EXPECT_EQ(observability::DescribeStalls({waiting, ""}, now, {{1, {1}}}),
            "rank 0 waits in step 7, allreduce of bucket 1 of 1 (40 B), for 4 s; rank 1 is gone "
            "with machine 1 (its launcher vanished)");
}

}  // namespace
}  // namespace dpl::supervision
