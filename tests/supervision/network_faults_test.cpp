// Two launchers as two machines in two network namespaces joined by a veth pair (root only; they
// skip elsewhere): a network partition in the middle of training, and the addresses the backends
// advertise to a peer on the other machine.
#include <gtest/gtest.h>

#include "network_namespaces.hpp"
#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kStorePort = 29741;  // a fresh namespace has no other listener

class NetworkFaultsTest : public TrainingJobTest,
                          public ::testing::WithParamInterface<const char*> {
 protected:
  // The flags of machine `id` of a 2-machine job whose store is in namespace 0.
  Args OnMachine(Args args, int id, const NamespacePair& machines) const {
    args.insert(args.end(), {"--num-machines", "2", "--machine-id", std::to_string(id),
                             "--master-addr", machines.Address(0), "--master-port",
                             std::to_string(kStorePort), "--rendezvous-timeout", "30"});
    return args;
  }
  Args Selftest(const Args& extra) const {
    Args args = {"--plugin-dir",
                 DPL_TEST_PLUGIN_DIR,
                 "--selftest",
                 "--num-processes",
                 "1",
                 "--batch-size",
                 "2",
                 "--backend",
                 GetParam()};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

std::vector<pid_t> Concat(std::vector<pid_t> head, const std::vector<pid_t>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

bool WaitForText(const LauncherProcess& process, const std::string& text,
                 std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (Contains(process.Output(), text)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Machine 1's link goes down mid-training: nothing tells either side, packets just stop. Machine 1
// must notice that machine 0 is out of reach and stop, reaping its worker, within
// --backend-timeout; machine 0 must stop too and name machine 1.
TEST_P(NetworkFaultsTest, APartitionStopsMachineOneWithinTheBackendTimeout) {
  NamespacePair machines(std::string("p") + GetParam()[0], 1);
  const std::string why_not = machines.Create();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const Args job = Job(GetParam(), "mlp", 1, {"--backend-timeout", "5", "--log-interval", "1"});
  LauncherProcess machine0(OnMachine(job, 0, machines), OutputPath("m0"), machines.Exec(0));
  LauncherProcess machine1(OnMachine(job, 1, machines), OutputPath("m1"), machines.Exec(1));
  ASSERT_TRUE(WaitForText(machine0, "training loss", 60s))
      << machine0.Output() << machine1.Output();
  const std::vector<pid_t> workers1 = WorkersOf(machine1.pid());
  ASSERT_EQ(workers1.size(), 1u) << machine1.Output();
  ASSERT_TRUE(machines.Cut());
  const auto cut = Clock::now();

  const auto status1 = machine1.Wait(15s);
  const double took = std::chrono::duration<double>(Clock::now() - cut).count();
  RecordProperty("machine1_seconds_to_stop", std::to_string(took));
  const std::string output1 = machine1.Output();
  EXPECT_TRUE(status1 && !ExitedWith(status1, 0)) << Describe(status1) << output1;
  EXPECT_LT(took, 8.0) << "machine 1 stopped " << took << " s after the cut (--backend-timeout 5)";
  EXPECT_TRUE(Contains(output1,
                       "[launcher 1] error: job failed: machine 1 lost the rendezvous store of "
                       "machine 0 and stopped its workers: "))
      << output1;
  EXPECT_TRUE(Contains(output1, "the rendezvous store at " + machines.Address(0) + ":" +
                                    std::to_string(kStorePort) + " is unresponsive"))
      << output1;
  EXPECT_TRUE(Contains(output1, "the network to it is down")) << output1;
  // Reaped by its launcher: no zombie, no orphan (an orphan would have become our child).
  for (pid_t pid : workers1) {
    EXPECT_TRUE(ReadProcFile(pid, "stat").empty()) << "worker " << pid << " is still there";
  }

  const auto status0 = machine0.Wait(20s);
  RecordProperty("machine0_seconds_to_stop",
                 std::to_string(std::chrono::duration<double>(Clock::now() - cut).count()));
  EXPECT_TRUE(status0 && !ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "error: job failed: machine 1 vanished: "))
      << machine0.Output();
}

// The same cut with the default --backend-timeout (300 s), while the backend's collectives wait
// on each other: neither side may wait it out. Machine 0 finds machine 1's beat stopped and ends
// the attempt (Note [Lost machines] in launcher/supervision/heartbeat.hpp); machine 1's store
// calls fail at their deadline. Both stop within 15 s, saying why, and leave no worker behind.
TEST_P(NetworkFaultsTest, ACutLinkStopsBothSidesWithin15sWithTheDefaultBackendTimeout) {
  NamespacePair machines(std::string("c") + GetParam()[0], 4);
  const std::string why_not = machines.Create();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const Args job =
      Job(GetParam(), "faulty", 1, {"--log-interval", "1", "--model-options", "step_ms=20"});
  LauncherProcess machine0(OnMachine(job, 0, machines), OutputPath("m0"), machines.Exec(0));
  LauncherProcess machine1(OnMachine(job, 1, machines), OutputPath("m1"), machines.Exec(1));
  ASSERT_TRUE(WaitForText(machine0, "training loss", 60s))
      << machine0.Output() << machine1.Output();
  const std::vector<pid_t> workers = Concat(WorkersOf(machine0.pid()), WorkersOf(machine1.pid()));
  ASSERT_EQ(workers.size(), 2u) << machine0.Output() << machine1.Output();
  ASSERT_TRUE(machines.Cut());
  const auto cut = Clock::now();
  const auto status0 = machine0.Wait(15s);
  const auto status1 = machine1.Wait(
      std::chrono::duration_cast<std::chrono::milliseconds>(15s - (Clock::now() - cut)));
  const double took = std::chrono::duration<double>(Clock::now() - cut).count();
  RecordProperty("seconds_until_both_stopped", std::to_string(took));
  EXPECT_TRUE(status0 && !ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(status1 && !ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(),
                       "error: job failed: machine 1 vanished: its launcher "
                       "stopped answering"))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine1.Output(),
                       "[launcher 1] error: job failed: machine 1 lost the rendezvous store of "
                       "machine 0 and stopped its workers: "))
      << machine1.Output();
  EXPECT_TRUE(WaitUntilGone(workers, 1s)) << "a worker outlived its launcher";
}

// By default a backend advertises the address that routes to machine 0, which the other machine
// reaches: a short training job across the two machines succeeds without --backend-options.
TEST_P(NetworkFaultsTest, TheDefaultBackendAddressIsTheRoutableOne) {
  NamespacePair machines(std::string("d") + GetParam()[0], 2);
  const std::string why_not = machines.Create();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const Args job = Job(GetParam(), "mlp", 1, {"--backend-timeout", "20", "--max-steps", "3"});
  LauncherProcess machine0(OnMachine(job, 0, machines), OutputPath("m0"), machines.Exec(0));
  LauncherProcess machine1(OnMachine(job, 1, machines), OutputPath("m1"), machines.Exec(1));
  const auto status0 = machine0.Wait(40s);
  const auto status1 = machine1.Wait(40s);
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] training done: 3 steps")) << machine0.Output();
}

// address=127.0.0.1 on two machines: each peer is refused on its own loopback. The job must say
// which option to pass within seconds, not time out after --backend-timeout.
TEST_P(NetworkFaultsTest, AForcedLoopbackAddressSaysWhichOptionToPass) {
  NamespacePair machines(std::string("l") + GetParam()[0], 3);
  const std::string why_not = machines.Create();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const Args selftest =
      Selftest({"--backend-timeout", "60", "--backend-options", "address=127.0.0.1"});
  const auto start = Clock::now();
  LauncherProcess machine0(OnMachine(selftest, 0, machines), OutputPath("m0"), machines.Exec(0));
  LauncherProcess machine1(OnMachine(selftest, 1, machines), OutputPath("m1"), machines.Exec(1));
  const auto status0 = machine0.Wait(40s);
  const auto status1 = machine1.Wait(40s);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  RecordProperty("seconds_to_stop", std::to_string(took));
  const std::string outputs = machine0.Output() + machine1.Output();
  EXPECT_TRUE(status0 && !ExitedWith(status0, 0)) << Describe(status0) << outputs;
  EXPECT_TRUE(status1 && !ExitedWith(status1, 0)) << Describe(status1) << outputs;
  EXPECT_LT(took, 15.0) << outputs;
  EXPECT_TRUE(Contains(outputs, "advertised the loopback address 127.0.0.1:")) << outputs;
  EXPECT_TRUE(Contains(outputs, ", which refuses connections here: ")) << outputs;
  EXPECT_TRUE(Contains(outputs, "--backend-options address=<its ip>")) << outputs;
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, NetworkFaultsTest, ::testing::Values("tcp", "gloo"));

}  // namespace
}  // namespace dpl::test
