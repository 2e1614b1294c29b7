// torchrun's flag spellings and the values torch.distributed.run accepts for them.
#include "cluster/torchrun_flags.hpp"

#include <gtest/gtest.h>

namespace dpl::cluster {
namespace {

using Flags = std::vector<std::pair<std::string, std::string>>;

TEST(TorchrunFlagsTest, AliasTable) {
  const std::vector<std::tuple<std::string, std::string, AliasValue>> expected = {
      {"nnodes", "num-machines", AliasValue::kNodeRange},
      {"node-rank", "machine-id", AliasValue::kSame},
      {"node_rank", "machine-id", AliasValue::kSame},
      {"nproc-per-node", "num-processes", AliasValue::kProcessesPerNode},
      {"nproc_per_node", "num-processes", AliasValue::kProcessesPerNode},
      {"rdzv-endpoint", "master-addr", AliasValue::kEndpoint},
      {"rdzv_endpoint", "master-addr", AliasValue::kEndpoint},
      {"master_addr", "master-addr", AliasValue::kSame},
      {"master_port", "master-port", AliasValue::kSame}};
  ASSERT_EQ(TorchrunFlagAliases().size(), expected.size());
  for (const auto& [name, flag, value] : expected) {
    const FlagAlias* alias = FindTorchrunAlias(name);
    ASSERT_NE(alias, nullptr) << name;
    EXPECT_EQ(alias->dpl_flag, flag) << name;
    EXPECT_EQ(alias->value, value) << name;
  }
  EXPECT_EQ(FindTorchrunAlias("master-addr"), nullptr);  // dpl's own flag, no alias
  EXPECT_EQ(FindTorchrunAlias("--nnodes"), nullptr);     // names come without dashes
  EXPECT_EQ(FindTorchrunAlias("rdzv-backend"), nullptr);
}

TEST(TorchrunFlagsTest, NodeRanges) {
  auto range = ParseNodeRange("2");
  ASSERT_TRUE(range.ok()) << range.status().message();
  EXPECT_EQ(range->min, 2);
  EXPECT_EQ(range->max, 2);
  range = ParseNodeRange("1:4");
  ASSERT_TRUE(range.ok()) << range.status().message();
  EXPECT_EQ(range->min, 1);
  EXPECT_EQ(range->max, 4);
  const std::string kNotARange =
      " is not a number of machines N or a range MIN:MAX (numbers from 1 to 1048576)";
  for (const std::string bad : {"0", "", "a", "1:2:3", ":3", "3:", "-1", "1:0", " 2"}) {
    auto refused = ParseNodeRange(bad);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().message(), "'" + bad + "'" + kNotARange);
  }
  EXPECT_EQ(ParseNodeRange("4:1").status().message(), "the range '4:1' goes down; write it as 1:4");
}

TEST(TorchrunFlagsTest, ProcessesPerNode) {
  using Kind = ProcessesPerNode::Kind;
  auto processes = ParseProcessesPerNode("4");
  ASSERT_TRUE(processes.ok());
  EXPECT_EQ(processes->kind, Kind::kCount);
  EXPECT_EQ(processes->count, 4);
  EXPECT_EQ(ParseProcessesPerNode("auto")->kind, Kind::kAuto);
  EXPECT_EQ(ParseProcessesPerNode("cpu")->kind, Kind::kCpu);
  EXPECT_EQ(ParseProcessesPerNode("gpu")->kind, Kind::kGpu);
  for (const std::string bad : {"0", "four", "xpu", "", "4.0", "GPU"}) {
    EXPECT_EQ(ParseProcessesPerNode(bad).status().message(),
              "'" + bad + "' is not a number of processes from 1 to 1048576, auto, cpu or gpu");
  }
}

TEST(TorchrunFlagsTest, ProcessKeywordsResolveAsTorchrunDoes) {
  using Kind = ProcessesPerNode::Kind;
  EXPECT_EQ(*ResolveProcessesPerNode({Kind::kCount, 3}, 16, 8), 3);
  EXPECT_EQ(*ResolveProcessesPerNode({Kind::kCpu, 0}, 16, 8), 16);
  EXPECT_EQ(*ResolveProcessesPerNode({Kind::kGpu, 0}, 16, 8), 8);
  EXPECT_EQ(*ResolveProcessesPerNode({Kind::kAuto, 0}, 16, 8), 8);
  EXPECT_EQ(*ResolveProcessesPerNode({Kind::kAuto, 0}, 16, 0), 16);
  EXPECT_EQ(ResolveProcessesPerNode({Kind::kGpu, 0}, 16, 0).status().message(),
            "'gpu' asks for one process per GPU, but this machine has none; give the number of "
            "processes instead");
  EXPECT_EQ(ResolveProcessesPerNode({Kind::kGpu, 0}, 16, std::nullopt).status().message(),
            "'gpu' needs the number of GPUs, which the launcher does not count; give the number "
            "of processes instead (e.g. 4)");
  EXPECT_EQ(ResolveProcessesPerNode({Kind::kAuto, 0}, 16, std::nullopt).status().message(),
            "'auto' needs the number of GPUs, which the launcher does not count; give the number "
            "of processes instead (e.g. 4)");
}

void ExpectEndpoint(const std::string& text, const std::string& host, int port, bool has_port) {
  auto endpoint = ParseEndpoint(text, 29500);
  ASSERT_TRUE(endpoint.ok()) << text << ": " << endpoint.status().message();
  EXPECT_EQ(endpoint->host, host) << text;
  EXPECT_EQ(endpoint->port, port) << text;
  EXPECT_EQ(endpoint->has_port, has_port) << text;
}

TEST(TorchrunFlagsTest, Endpoints) {
  ExpectEndpoint("node0:29400", "node0", 29400, true);
  ExpectEndpoint("node0", "node0", 29500, false);
  ExpectEndpoint("10.0.0.1:0", "10.0.0.1", 0, true);
  ExpectEndpoint("my_host.example-1.org:65535", "my_host.example-1.org", 65535, true);
  ExpectEndpoint("[fd00::1]:29400", "fd00::1", 29400, true);
  ExpectEndpoint("[fd00::1]", "fd00::1", 29500, false);
  ExpectEndpoint("[::ffff:10.0.0.1]:1", "::ffff:10.0.0.1", 1, true);
  ExpectEndpoint("[fe80::1%eth0]:7", "fe80::1%eth0", 7, true);
}

TEST(TorchrunFlagsTest, BadEndpoints) {
  auto error = [](const std::string& text) {
    return ParseEndpoint(text, 29500).status().message();
  };
  const std::string kExpected = "; expected HOST, HOST:PORT or [IPv6 address]:PORT";
  EXPECT_EQ(error(""), "endpoint '': empty" + kExpected);
  EXPECT_EQ(error(":29400"), "endpoint ':29400': no host before ':'" + kExpected);
  EXPECT_EQ(
      error("fd00::1:29400"),
      "endpoint 'fd00::1:29400': an IPv6 address needs brackets, e.g. [fd00::1]:29500" + kExpected);
  EXPECT_EQ(error("[fd00::1"), "endpoint '[fd00::1': '[' is not closed by ']'" + kExpected);
  EXPECT_EQ(error("[fd00::1]x"), "endpoint '[fd00::1]x': 'x' follows ']'" + kExpected);
  EXPECT_EQ(error("[]:1"), "endpoint '[]:1': no address inside '[...]'" + kExpected);
  EXPECT_EQ(error("[fd00::1/64]:1"), "endpoint '[fd00::1/64]:1': '/' in the address" + kExpected);
  EXPECT_EQ(error("bad host:1"), "endpoint 'bad host:1': ' ' in the host" + kExpected);
  EXPECT_EQ(error("node0:"), "the port of 'node0:' must be a number from 0 to 65535 (got '')");
  EXPECT_EQ(error("node0:70000"),
            "the port of 'node0:70000' must be a number from 0 to 65535 (got '70000')");
  EXPECT_EQ(error("[fd00::1]:x"),
            "the port of '[fd00::1]:x' must be a number from 0 to 65535 (got 'x')");
}

Flags Translate(const std::string& name, const std::string& value) {
  const FlagAlias* alias = FindTorchrunAlias(name);
  EXPECT_NE(alias, nullptr) << name;
  if (alias == nullptr) return {};
  auto flags = TranslateTorchrunFlag(*alias, value, 16, 8);
  EXPECT_TRUE(flags.ok()) << name << " " << value << ": " << flags.status().message();
  return flags.ok() ? *flags : Flags{};
}

std::string TranslateError(const std::string& name, const std::string& value) {
  auto flags = TranslateTorchrunFlag(*FindTorchrunAlias(name), value, 16, std::nullopt);
  EXPECT_FALSE(flags.ok()) << name << " " << value;
  return flags.status().message();
}

TEST(TorchrunFlagsTest, TranslationToDplFlags) {
  EXPECT_EQ(Translate("nnodes", "2"), (Flags{{"num-machines", "2"}}));
  EXPECT_EQ(Translate("nnodes", "3:3"), (Flags{{"num-machines", "3"}}));
  EXPECT_EQ(Translate("nnodes", "1:4"), (Flags{{"num-machines", "1:4"}}));  // an elastic job
  EXPECT_EQ(Translate("node_rank", "1"), (Flags{{"machine-id", "1"}}));
  EXPECT_EQ(Translate("node-rank", "0"), (Flags{{"machine-id", "0"}}));
  EXPECT_EQ(Translate("nproc-per-node", "4"), (Flags{{"num-processes", "4"}}));
  EXPECT_EQ(Translate("nproc_per_node", "gpu"), (Flags{{"num-processes", "8"}}));
  EXPECT_EQ(Translate("nproc_per_node", "cpu"), (Flags{{"num-processes", "16"}}));
  EXPECT_EQ(Translate("rdzv-endpoint", "[::1]:1234"),
            (Flags{{"master-addr", "::1"}, {"master-port", "1234"}}));
  EXPECT_EQ(Translate("rdzv_endpoint", "node0"), (Flags{{"master-addr", "node0"}}));
  EXPECT_EQ(Translate("master_addr", "10.0.0.1"), (Flags{{"master-addr", "10.0.0.1"}}));
  EXPECT_EQ(Translate("master_port", "29501"), (Flags{{"master-port", "29501"}}));
}

TEST(TorchrunFlagsTest, TranslationErrorsNameTheFlag) {
  EXPECT_EQ(TranslateError("nnodes", "x"),
            "--nnodes: 'x' is not a number of machines N or a range MIN:MAX (numbers from 1 to "
            "1048576)");
  EXPECT_EQ(TranslateError("nproc_per_node", "x"),
            "--nproc_per_node: 'x' is not a number of processes from 1 to 1048576, auto, cpu or "
            "gpu");
  EXPECT_EQ(TranslateError("nproc-per-node", "auto"),
            "--nproc-per-node: 'auto' needs the number of GPUs, which the launcher does not "
            "count; give the number of processes instead (e.g. 4)");
  EXPECT_EQ(TranslateError("rdzv-endpoint", "a:b:c"),
            "--rdzv-endpoint: endpoint 'a:b:c': an IPv6 address needs brackets, e.g. "
            "[fd00::1]:29500; expected HOST, HOST:PORT or [IPv6 address]:PORT");
}

}  // namespace
}  // namespace dpl::cluster
