// The launcher binary end to end with --selftest (no backend or model plugin needed): several
// launchers on one host as different machines, failures, signals, bad configurations.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstdlib>
#include <random>

#include "launcher_processes.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;
using Args = std::vector<std::string>;

std::string OutputPath(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(DPL_TEST_BINARY_DIR) + "/" + info->name() + "-" + name + ".log";
}

// A --selftest launcher; `extra` may override the rendezvous timeout (20 s otherwise).
Args Selftest(int machines, int machine_id, int processes, int port, Args extra = {}) {
  Args args = {"--selftest", "--num-machines", std::to_string(machines), "--machine-id",
               std::to_string(machine_id), "--num-processes", std::to_string(processes),
               "--master-addr", "127.0.0.1", "--master-port", std::to_string(port),
               // The CLI wants the global batch divisible by the world size.
               "--batch-size", std::to_string(machines * processes * 2)};
  if (std::find(extra.begin(), extra.end(), "--rendezvous-timeout") == extra.end()) {
    args.insert(args.end(), {"--rendezvous-timeout", "20"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A port nothing listens on (bound, then released).
int FreePort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class LauncherTest : public ::testing::Test {
 protected:
  // Orphans of killed launchers become our children, so the test can see all of them.
  void SetUp() override { prctl(PR_SET_CHILD_SUBREAPER, 1); }
};

TEST_F(LauncherTest, TwoMachinesTimesTwoProcessesJoinWithDistinctRanks) {
  LauncherProcess machine0(Selftest(2, 0, 2, 0, {"--log-dir", OutputPath("logs")}),
                           OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Selftest(2, 1, 2, port, {"--log-dir", OutputPath("logs")}),
                           OutputPath("m1"));
  const auto status0 = machine0.Wait(20s);
  const auto status1 = machine1.Wait(20s);
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] selftest ok: world size 4, ranks 0,1,2,3"))
      << machine0.Output();
  // Only rank 0 speaks on the console; every rank has its own log file.
  EXPECT_FALSE(Contains(machine1.Output(), "[rank 2]")) << machine1.Output();
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream log(OutputPath("logs") + "/rank-" + std::to_string(rank) + ".log");
    EXPECT_TRUE(log.good()) << "no log file for rank " << rank;
  }
}

TEST_F(LauncherTest, KillingOneWorkerStopsEveryLauncherNamingThatRank) {
  // Three machines are expected and two come, so the workers wait in the join barrier: mid-run.
  LauncherProcess machine0(Selftest(3, 0, 2, 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Selftest(3, 1, 2, port), OutputPath("m1"));
  ASSERT_TRUE(WaitForWorkers(machine0.pid(), 2, 10s));
  ASSERT_TRUE(WaitForWorkers(machine1.pid(), 2, 10s));
  std::vector<pid_t> workers = WorkersOf(machine0.pid());
  for (pid_t pid : WorkersOf(machine1.pid())) workers.push_back(pid);
  const pid_t victim = WorkerWithRank(machine1.pid(), 3);  // machine 1, local rank 1
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  const auto status0 = machine0.Wait(10s);
  const auto status1 = machine1.Wait(10s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_TRUE(status0 && !ExitedWith(status0, 0)) << Describe(status0);
  EXPECT_TRUE(status1 && !ExitedWith(status1, 0)) << Describe(status1);
  const std::string cause = "rank 3 (machine 1, local rank 1, pid " + std::to_string(victim) +
                            ") failed first: killed by signal 9 (SIGKILL)";
  EXPECT_TRUE(Contains(machine1.Output(), "error: job failed: " + cause)) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "error: job failed: the job failed elsewhere: " + cause))
      << machine0.Output();
  EXPECT_TRUE(WaitUntilGone(workers, 1s)) << "a worker of the job outlived its launcher";
}

TEST_F(LauncherTest, AWorkerFailureReportsItsExitCodeAndLastLines) {
  // One machine of two never comes: the worker's join barrier times out, it says why and exits
  // with the code of a failure that follows from others' (a timeout waiting on them), and as no
  // other failure turns up, the launcher passes it on as the root cause.
  LauncherProcess machine0(Selftest(2, 0, 1, 0, {"--rendezvous-timeout", "1"}), OutputPath("m0"));
  const auto status = machine0.Wait(15s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  const std::string output = machine0.Output();
  EXPECT_TRUE(Contains(output, "error: job failed: rank 0 (machine 0, local rank 0, pid "))
      << output;
  EXPECT_TRUE(Contains(output,
                       ") failed first: exit code 3 (it lost a peer or the rendezvous store); the "
                       "last lines of its log (the root cause):\n"
                       "    [rank 0] error: waiting for all ranks to join: barrier 'join': 1 of 2 "
                       "ranks arrived: timed out after 1 s waiting for store key(s) "
                       "'attempt/0/barrier/join/done'"))
      << output;
  // The barrier counts ranks; the launcher names the machine that never came and what to check.
  EXPECT_TRUE(Contains(output,
                       "error: machine 1 never joined: no launcher of it (--machine-id 1 or auto) "
                       "reached the store at 127.0.0.1:"))
      << output;
  EXPECT_TRUE(Contains(output, "; start it, or check its --master-addr and --master-port\n"))
      << output;
}

// A process's environment, one entry per line (leading line break included, so every entry reads
// "\nNAME=value\n"). glibc splits GLIBC_TUNABLES at ':' in place when a process starts, so ':'
// reads as a line break too.
std::string EnvironmentLines(pid_t pid) {
  std::string environment = "\n" + ReadProcFile(pid, "environ");
  for (auto& c : environment) c = c == '\0' || c == ':' ? '\n' : c;
  return environment;
}

TEST_F(LauncherTest, KilledLauncherTakesItsWorkersWithIt) {
  LauncherProcess machine0(Selftest(2, 0, 2, 0, {"--threads-per-worker", "3"}), OutputPath("m0"));
  ASSERT_TRUE(WaitForWorkers(machine0.pid(), 2, 10s)) << machine0.Output();
  const std::vector<pid_t> workers = WorkersOf(machine0.pid());
  for (pid_t pid : workers) {
    const std::string environment = EnvironmentLines(pid);
    EXPECT_TRUE(Contains(environment, "\nOMP_NUM_THREADS=3\n")) << environment;
    EXPECT_TRUE(Contains(environment, "\nDPL_ATTEMPT=0\n")) << environment;
  }
  ASSERT_EQ(kill(machine0.pid(), SIGKILL), 0);
  machine0.Wait(5s);
  EXPECT_TRUE(WaitUntilGone(workers, 5s)) << "workers outlived their SIGKILLed launcher";
}

// EnvironmentLines of the one worker of a launcher started through `env_prefix`.
std::string WorkerEnvironment(const Args& env_prefix) {
  LauncherProcess machine0(Selftest(2, 0, 1, 0), OutputPath("m0"), env_prefix);
  if (!WaitForWorkers(machine0.pid(), 1, 10s)) return "no worker started: " + machine0.Output();
  return EnvironmentLines(WorkersOf(machine0.pid()).at(0));
}

TEST_F(LauncherTest, WorkersGetAHugePageHeapUnlessTheUserSetTheirOwn) {
  // Note [Worker heap]
  const std::string defaults =
      WorkerEnvironment({"env", "-u", "MALLOC_TOP_PAD_", "-u", "GLIBC_TUNABLES"});
  EXPECT_TRUE(Contains(defaults, "\nMALLOC_TOP_PAD_=67108864\n")) << defaults;
  EXPECT_TRUE(Contains(defaults, "\nGLIBC_TUNABLES=glibc.malloc.hugetlb=1\n")) << defaults;

  const std::string added_to_theirs =
      WorkerEnvironment({"env", "-u", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES=glibc.malloc.check=0"});
  EXPECT_TRUE(
      Contains(added_to_theirs, "\nGLIBC_TUNABLES=glibc.malloc.check=0\nglibc.malloc.hugetlb=1\n"))
      << added_to_theirs;

  const std::string theirs =
      WorkerEnvironment({"env", "MALLOC_TOP_PAD_=4096", "GLIBC_TUNABLES=glibc.malloc.hugetlb=0"});
  EXPECT_TRUE(Contains(theirs, "\nMALLOC_TOP_PAD_=4096\n")) << theirs;
  EXPECT_TRUE(Contains(theirs, "\nGLIBC_TUNABLES=glibc.malloc.hugetlb=0\n")) << theirs;
  EXPECT_FALSE(Contains(theirs, "67108864")) << theirs;
  EXPECT_FALSE(Contains(theirs, "hugetlb=1")) << theirs;
}

TEST_F(LauncherTest, WorkersIgnoreSigpipe) {
  // dpl/common.h promises plugins that a write to a dead peer's socket fails with EPIPE.
  LauncherProcess machine0(Selftest(2, 0, 2, 0), OutputPath("m0"));
  ASSERT_TRUE(WaitForWorkers(machine0.pid(), 2, 10s)) << machine0.Output();
  for (pid_t pid : WorkersOf(machine0.pid())) {
    const std::string status = ReadProcFile(pid, "status");
    const size_t field = status.find("SigIgn:");
    ASSERT_NE(field, std::string::npos) << status;
    const unsigned long long ignored = std::stoull(status.substr(field + 7), nullptr, 16);
    EXPECT_TRUE(ignored & (1ull << (SIGPIPE - 1))) << status;
  }
}

TEST_F(LauncherTest, WorkersAreForkedFromOneLoaderAndAdoptedByTheLauncher) {
  // Machine 1 never comes, so machine 0's workers wait in the join barrier.
  LauncherProcess machine0(Selftest(2, 0, 3, 0), OutputPath("m0"));
  ASSERT_TRUE(WaitForWorkers(machine0.pid(), 3, 10s)) << machine0.Output();
  const std::vector<pid_t> workers = WorkersOf(machine0.pid());
  ASSERT_EQ(workers.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) EXPECT_GT(WorkerWithRank(machine0.pid(), rank), 0) << rank;
  for (pid_t pid : workers) {
    // Forked from the loader (its command line), not exec'd on their own with --local-rank.
    std::string cmdline = ReadProcFile(pid, "cmdline");
    for (auto& c : cmdline) c = c == '\0' ? ' ' : c;
    EXPECT_TRUE(Contains(cmdline, " --worker-outputs ")) << cmdline;
    EXPECT_FALSE(Contains(cmdline, " --local-rank ")) << cmdline;
  }
  ASSERT_EQ(kill(machine0.pid(), SIGKILL), 0);
  machine0.Wait(5s);
  EXPECT_TRUE(WaitUntilGone(workers, 5s)) << "workers outlived their SIGKILLed launcher";
}

TEST_F(LauncherTest, SigtermToALauncherStopsItsWorkers) {
  LauncherProcess machine0(Selftest(2, 0, 2, 0), OutputPath("m0"));
  ASSERT_TRUE(WaitForWorkers(machine0.pid(), 2, 10s)) << machine0.Output();
  const std::vector<pid_t> workers = WorkersOf(machine0.pid());
  ASSERT_EQ(kill(machine0.pid(), SIGTERM), 0);
  const auto status = machine0.Wait(10s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_TRUE(Contains(machine0.Output(),
                       "error: job failed: the launcher of machine 0 was stopped by signal 15 "
                       "(SIGTERM)"))
      << machine0.Output();
  EXPECT_TRUE(WaitUntilGone(workers, 1s));
}

// A machine of a fixed job that comes later than a start takes (here 23 s) but within the
// rendezvous timeout joins it: it was never a member that left (Note [Lost machines]).
TEST_F(LauncherTest, AMachineThatComesLateWithinTheRendezvousTimeoutJoins) {
  LauncherProcess machine0(Selftest(2, 0, 1, 0, {"--rendezvous-timeout", "60"}), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  std::this_thread::sleep_for(23s);  // past kMachineNeverBegan
  LauncherProcess machine1(Selftest(2, 1, 1, port, {"--rendezvous-timeout", "60"}),
                           OutputPath("m1"));
  const auto status0 = machine0.Wait(60s);
  const auto status1 = machine1.Wait(60s);
  EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
  EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
}

TEST_F(LauncherTest, UnreachableMasterFailsWithinTheRendezvousTimeoutNamingAddrPort) {
  const int port = FreePort();
  const auto start = std::chrono::steady_clock::now();
  LauncherProcess machine1(Selftest(2, 1, 1, port, {"--rendezvous-timeout", "3"}),
                           OutputPath("m1"));
  const auto status = machine1.Wait(10s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_GE(elapsed, 3s);
  EXPECT_LT(elapsed, 6s);
  EXPECT_TRUE(Contains(machine1.Output(),
                       "[launcher 1] error: could not reach the rendezvous store at 127.0.0.1:" +
                           std::to_string(port) + " within 3 s (last error: Connection refused)"))
      << machine1.Output();
}

TEST_F(LauncherTest, PortInUseIsAnErrorNamingAddrPort) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor taken(io, {boost::asio::ip::make_address("0.0.0.0"), 0});
  const int port = taken.local_endpoint().port();
  LauncherProcess machine0(Selftest(1, 0, 1, port), OutputPath("m0"));
  const auto status = machine0.Wait(10s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_TRUE(Contains(
      machine0.Output(),
      "[launcher 0] error: cannot serve the rendezvous store on 127.0.0.1:" + std::to_string(port) +
          ": Address already in use (another process uses this port; pick "
          "another --master-port or stop that process)"))
      << machine0.Output();
}

TEST_F(LauncherTest, MismatchedSizesAreRefusedNamingBothValuesAndStopTheJob) {
  LauncherProcess machine0(Selftest(2, 0, 1, 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Selftest(2, 1, 2, port), OutputPath("m1"));
  const auto status1 = machine1.Wait(10s);
  const auto status0 = machine0.Wait(10s);
  EXPECT_TRUE(ExitedWith(status1, 1)) << Describe(status1);
  EXPECT_TRUE(ExitedWith(status0, 1)) << Describe(status0);
  const std::string message =
      "--num-processes differs between machines: this machine (--machine-id 1) has 2, machine 0 "
      "has 1; pass the same value to every launcher";
  EXPECT_TRUE(Contains(machine1.Output(), "[launcher 1] error: " + message)) << machine1.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "machine 1 could not join: " + message))
      << machine0.Output();
}

TEST_F(LauncherTest, RepeatedMachineIdIsRefused) {
  LauncherProcess machine0(Selftest(3, 0, 1, 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess first(Selftest(3, 1, 1, port), OutputPath("first"));
  ASSERT_TRUE(WaitForWorkers(first.pid(), 1, 10s));
  LauncherProcess second(Selftest(3, 1, 1, port), OutputPath("second"));
  const auto status = second.Wait(10s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  // Both machines are named: host name, address towards machine 0, and pid.
  EXPECT_TRUE(Contains(second.Output(),
                       "[launcher 1] error: --machine-id 1 is claimed by two "
                       "machines: "))
      << second.Output();
  EXPECT_TRUE(Contains(second.Output(), " 127.0.0.1 pid " + std::to_string(first.pid()) + " and "))
      << second.Output();
  EXPECT_TRUE(Contains(second.Output(),
                       " 127.0.0.1 pid " + std::to_string(second.pid()) +
                           " (this one); give every machine a distinct id in [0, 3), or leave "
                           "--machine-id out to number the machines in the order they join"))
      << second.Output();
}

TEST_F(LauncherTest, WrongJobTokenIsRefusedAndTheStoreKeepsServing) {
  LauncherProcess machine0(Selftest(2, 0, 1, 0, {"--job-token", "right"}), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess stray(Selftest(2, 1, 1, port, {"--job-token", "wrong"}), OutputPath("stray"));
  const auto stray_status = stray.Wait(10s);
  EXPECT_TRUE(ExitedWith(stray_status, 1)) << Describe(stray_status);
  EXPECT_TRUE(Contains(
      stray.Output(),
      "[launcher 1] error: joining the rendezvous store at 127.0.0.1:" + std::to_string(port) +
          ": handshake refused by the rendezvous store at 127.0.0.1:" + std::to_string(port) +
          ": job token does not match the job's"))
      << stray.Output();
  LauncherProcess machine1(Selftest(2, 1, 1, port, {"--job-token", "right"}), OutputPath("m1"));
  EXPECT_TRUE(ExitedWith(machine1.Wait(20s), 0)) << machine1.Output();
  EXPECT_TRUE(ExitedWith(machine0.Wait(20s), 0)) << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "selftest ok: world size 2, ranks 0,1"));
  EXPECT_TRUE(Contains(machine0.Output(), "refused the client: job token does not match"));
}

TEST_F(LauncherTest, RandomBytesToTheStorePortAreLoggedAndTheStoreKeepsServing) {
  LauncherProcess machine0(Selftest(2, 0, 1, 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    std::vector<uint8_t> garbage(1024 * 1024);
    std::mt19937 random(12345);
    for (auto& byte : garbage) byte = static_cast<uint8_t>(random());
    garbage[0] = 0x42;  // not the handshake op, whatever the seed gives
    boost::system::error_code error;
    boost::asio::write(socket, boost::asio::buffer(garbage), error);
  }
  LauncherProcess machine1(Selftest(2, 1, 1, port), OutputPath("m1"));
  EXPECT_TRUE(ExitedWith(machine1.Wait(20s), 0)) << machine1.Output();
  EXPECT_TRUE(ExitedWith(machine0.Wait(20s), 0)) << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(),
                       ": expected a handshake (op 0x01) but got op 0x42; not a dpl store client?"))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(), "selftest ok: world size 2, ranks 0,1"));
}

TEST_F(LauncherTest, MaxRestartsRestartsTheJobWithResume) {
  // The first attempt fails (its join barrier times out after 1 s, one machine of two is
  // missing); the launcher restarts once, then gives up.
  LauncherProcess machine0(
      Selftest(2, 0, 1, 0, {"--rendezvous-timeout", "1", "--max-restarts", "1"}), OutputPath("m0"));
  const auto status = machine0.Wait(20s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  const std::string output = machine0.Output();
  EXPECT_TRUE(Contains(output, "restarting the job (restart 1 of 1) with --resume")) << output;
  EXPECT_TRUE(Contains(output, "'attempt/1/barrier/join/done'")) << output;
}

#ifdef DPL_TEST_HAVE_TCP_AND_MLP
// The worker's training path up to the backend: a backend that refuses to start is reported with
// the plugin's own message, and the launcher passes it on as the root cause.
TEST_F(LauncherTest, ABackendThatFailsToStartIsReportedWithThePluginsMessage) {
  LauncherProcess machine0({"--plugin-dir", DPL_TEST_PLUGIN_DIR, "--num-processes", "1",
                            "--master-port", "0", "--backend", "tcp", "--backend-options",
                            "bogus=1", "--model", "mlp", "--max-steps", "1", "--no-progress"},
                           OutputPath("m0"));
  const auto status = machine0.Wait(60s);
  EXPECT_TRUE(ExitedWith(status, 1)) << Describe(status);
  EXPECT_TRUE(Contains(machine0.Output(), "[rank 0] error: backend tcp failed to start: "))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(),
                       "create failed with DPL_ERR_INVALID_ARGUMENT: tcp: unknown option "
                       "\"bogus\" in --backend-options"))
      << machine0.Output();
  EXPECT_TRUE(Contains(machine0.Output(),
                       "[launcher 0] error: job failed: rank 0 (machine 0, local rank 0, pid "))
      << machine0.Output();
}
#endif

// Two network namespaces joined by a veth pair, one launcher in each with its own address.
TEST_F(LauncherTest, TwoNetworkNamespacesOverAVethPair) {
  const std::string suffix = std::to_string(getpid() % 100000);
  const std::string ns_a = "dplrdzv-a-" + suffix, ns_b = "dplrdzv-b-" + suffix;
  const std::string veth_a = "dpla" + suffix, veth_b = "dplb" + suffix;
  auto sh = [](const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  };
  auto cleanup = [&] {
    sh("ip netns delete " + ns_a);
    sh("ip netns delete " + ns_b);
  };
  if (!sh("ip netns add " + ns_a)) {
    GTEST_SKIP() << "cannot create network namespaces here (needs root/CAP_SYS_ADMIN and `ip`)";
  }
  const bool ready = sh("ip netns add " + ns_b) &&
                     sh("ip link add " + veth_a + " netns " + ns_a + " type veth peer name " +
                        veth_b + " netns " + ns_b) &&
                     sh("ip -n " + ns_a + " addr add 10.231.0.1/24 dev " + veth_a) &&
                     sh("ip -n " + ns_b + " addr add 10.231.0.2/24 dev " + veth_b) &&
                     sh("ip -n " + ns_a + " link set " + veth_a + " up") &&
                     sh("ip -n " + ns_b + " link set " + veth_b + " up") &&
                     sh("ip -n " + ns_a + " link set lo up") &&
                     sh("ip -n " + ns_b + " link set lo up");
  if (!ready) {
    cleanup();
    GTEST_SKIP() << "cannot set up a veth pair between network namespaces here";
  }
  const int port = 29731;  // a fresh namespace has no other listener
  Args common = {"--selftest",
                 "--num-machines",
                 "2",
                 "--num-processes",
                 "2",
                 "--master-addr",
                 "10.231.0.1",
                 "--master-port",
                 std::to_string(port),
                 "--rendezvous-timeout",
                 "20"};
  Args args0 = common, args1 = common;
  args0.insert(args0.end(), {"--machine-id", "0"});
  args1.insert(args1.end(), {"--machine-id", "1"});
  {
    LauncherProcess machine0(args0, OutputPath("m0"), {"ip", "netns", "exec", ns_a});
    LauncherProcess machine1(args1, OutputPath("m1"), {"ip", "netns", "exec", ns_b});
    const auto status0 = machine0.Wait(30s);
    const auto status1 = machine1.Wait(30s);
    EXPECT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << machine0.Output();
    EXPECT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
    EXPECT_TRUE(Contains(machine0.Output(), "selftest ok: world size 4, ranks 0,1,2,3"))
        << machine0.Output();
  }
  cleanup();
}

}  // namespace
}  // namespace dpl::test
