// The link test through real backends (worker/link_test.hpp): --selftest's table on loopback (two
// launchers of two workers each), and in three network namespaces, each joined to each other by a
// veth pair of its own, with one pair slowed by tc (root only; skipped elsewhere): the slowest
// link of the table is that pair, and --preflight warns of it naming both hosts while the job
// still trains.
#include <gtest/gtest.h>

#include <iostream>
#include <regex>

#include "namespace_mesh.hpp"
#include "training_jobs.hpp"

namespace dpl::test {
namespace {

using namespace std::chrono_literals;

constexpr int kStorePort = 29742;  // a fresh namespace has no other listener

class LinkTestTest : public TrainingJobTest, public ::testing::WithParamInterface<const char*> {
 protected:
  // A selftest of `processes` workers a machine through the test's backend.
  Args Selftest(int machines, int processes) const {
    return {"--plugin-dir",
            DPL_TEST_PLUGIN_DIR,
            "--backend",
            GetParam(),
            "--selftest",
            "--num-processes",
            std::to_string(processes),
            "--batch-size",
            std::to_string(machines * processes)};
  }
  // Machine `id` of a job of `machines` machines, machine 0's store at `master`:`port`.
  Args Machine(Args args, int machines, int id, const std::string& master, int port) const {
    args.insert(args.end(),
                {"--num-machines", std::to_string(machines), "--machine-id", std::to_string(id),
                 "--master-addr", master, "--master-port", std::to_string(port),
                 "--rendezvous-timeout", "60", "--log-time", "none"});
    return args;
  }
};

// The lines of `output` that contain `part`.
std::vector<std::string> LinesWith(const std::string& output, const std::string& part) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (Contains(line, part)) lines.push_back(line);
  }
  return lines;
}

TEST_P(LinkTestTest, TheSelftestMeasuresEveryLinkBetweenAndWithinMachines) {
  LauncherProcess machine0(Machine(Selftest(2, 2), 2, 0, "127.0.0.1", 0), OutputPath("m0"));
  const int port = machine0.WaitForStorePort();
  ASSERT_GT(port, 0) << machine0.Output();
  LauncherProcess machine1(Machine(Selftest(2, 2), 2, 1, "127.0.0.1", port), OutputPath("m1"));
  const auto status0 = machine0.Wait(60s);
  const auto status1 = machine1.Wait(60s);
  const std::string output = machine0.Output();
  ASSERT_TRUE(ExitedWith(status0, 0)) << Describe(status0) << output;
  ASSERT_TRUE(ExitedWith(status1, 0)) << Describe(status1) << machine1.Output();
  EXPECT_EQ(
      LinesWith(output, std::string("link test through backend ") + GetParam() + ": 3 links in ")
          .size(),
      1u)
      << output;
  // One link between the machines, one within each: rows of a latency and a bandwidth.
  const std::regex row(
      R"(\[rank 0\]   .+ \(127\.0\.0\.1\) (worker 0 )?<-> .+ +[0-9]+\.[0-9]{3} ms +[0-9]+\.[0-9] MB/s)");
  int between = 0, within = 0;
  for (const std::string& line : LinesWith(output, "<->")) {
    if (!std::regex_match(line, row)) continue;
    ++(Contains(line, "worker 0 <-> worker 1") ? within : between);
  }
  EXPECT_EQ(between, 1) << output;
  EXPECT_EQ(within, 2) << output;
  EXPECT_EQ(LinesWith(output, "[rank 0] slowest link: ").size(), 1u) << output;
}

// Three machines, the link between machines 1 and 2 slowed both ways: the slowest of the table,
// and the one --preflight warns of. The table goes to the test's output.
TEST_P(LinkTestTest, OneSlowPairOfThreeMachinesIsTheSlowestAndPreflightWarnsOfIt) {
  NamespaceMesh mesh(std::string("l") + GetParam()[0], 3, 1);
  const std::string why_not = mesh.Create();
  if (!why_not.empty()) GTEST_SKIP() << why_not;
  const std::string qdisc =
      mesh.Slow(1, 2, "delay 20ms rate 8mbit", "rate 8mbit burst 32kb latency 400ms");
  if (qdisc.empty()) GTEST_SKIP() << "tc can neither netem nor tbf here";
  if (qdisc != "netem") std::cout << "no netem in this kernel: the pair is slowed by tbf's rate\n";
  const std::string pair = "(" + mesh.Address(1) + ") <-> ";
  const auto run = [&](const Args& flags, const std::string& name) {
    std::vector<std::unique_ptr<LauncherProcess>> machines;
    for (int id = 0; id < 3; ++id) {
      machines.push_back(
          std::make_unique<LauncherProcess>(Machine(flags, 3, id, mesh.Address(0), kStorePort),
                                            OutputPath(name + std::to_string(id)), mesh.Exec(id)));
    }
    for (auto& machine : machines) {
      const auto status = machine->Wait(120s);
      EXPECT_TRUE(ExitedWith(status, 0)) << Describe(status) << machine->Output();
    }
    return machines.front()->Output();
  };

  const std::string selftest = run(Selftest(3, 2), "selftest");
  std::cout << selftest;
  const std::vector<std::string> slowest = LinesWith(selftest, "[rank 0] slowest link: ");
  ASSERT_EQ(slowest.size(), 1u) << selftest;
  EXPECT_TRUE(Contains(slowest[0], pair) && Contains(slowest[0], "(" + mesh.Address(2) + "): "))
      << slowest[0];

  // One worker a machine: a global batch of 3.
  const Args job = Job(GetParam(), "mlp", 1, {"--preflight", "--max-steps", "5"}, 3);
  const std::string trained = run(job, "preflight");
  std::cout << trained;
  const std::vector<std::string> warnings = LinesWith(trained, "[rank 0] warning: slow link: ");
  ASSERT_EQ(warnings.size(), 1u) << trained;
  EXPECT_TRUE(Contains(warnings[0], pair) && Contains(warnings[0], "(" + mesh.Address(2) + "): "))
      << warnings[0];
  EXPECT_TRUE(Contains(trained, "[rank 0] training done: 5 steps")) << trained;
}

INSTANTIATE_TEST_SUITE_P(Backends, LinkTestTest, ::testing::Values("tcp", "gloo"));

}  // namespace
}  // namespace dpl::test
