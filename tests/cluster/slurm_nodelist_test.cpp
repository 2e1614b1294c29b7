// Slurm host lists: every form Slurm writes, each refusal with its exact message, and where
// scontrol is installed, the same lists expanded by Slurm itself.
#include "cluster/slurm_nodelist.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace dpl::cluster {
namespace {

using Hosts = std::vector<std::string>;

Hosts Expand(const std::string& list) {
  auto hosts = ExpandSlurmNodeList(list);
  EXPECT_TRUE(hosts.ok()) << list << ": " << hosts.status().message();
  return hosts.ok() ? *hosts : Hosts{};
}

std::string ErrorOf(const std::string& list) {
  auto hosts = ExpandSlurmNodeList(list);
  EXPECT_FALSE(hosts.ok()) << list << " was accepted";
  EXPECT_EQ(hosts.status().code(), DPL_ERR_INVALID_ARGUMENT);
  return hosts.status().message();
}

TEST(SlurmNodeListTest, SingleHosts) {
  EXPECT_EQ(Expand("node1"), (Hosts{"node1"}));
  EXPECT_EQ(Expand("login"), (Hosts{"login"}));
  EXPECT_EQ(Expand("a.b-c_d.example.org"), (Hosts{"a.b-c_d.example.org"}));
}

TEST(SlurmNodeListTest, Ranges) {
  EXPECT_EQ(Expand("node[1-3]"), (Hosts{"node1", "node2", "node3"}));
  EXPECT_EQ(Expand("node[7]"), (Hosts{"node7"}));
  EXPECT_EQ(Expand("n[9-11]"), (Hosts{"n9", "n10", "n11"}));
  EXPECT_EQ(Expand("[1-2]"), (Hosts{"1", "2"}));
  EXPECT_EQ(Expand("a.b-c[1-2]"), (Hosts{"a.b-c1", "a.b-c2"}));
}

TEST(SlurmNodeListTest, ZeroPaddingFollowsTheFirstNumber) {
  EXPECT_EQ(Expand("gpu[01-04,07],cpu3"),
            (Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}));
  EXPECT_EQ(Expand("n[08-10]"), (Hosts{"n08", "n09", "n10"}));
  EXPECT_EQ(Expand("n[001-3]"), (Hosts{"n001", "n002", "n003"}));
  EXPECT_EQ(Expand("n[1-010]"),
            (Hosts{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}));
}

TEST(SlurmNodeListTest, ListsKeepTheirOrderAndDuplicates) {
  EXPECT_EQ(Expand("n[3,1-2]"), (Hosts{"n3", "n1", "n2"}));
  EXPECT_EQ(Expand("n[1-2],n[2-3]"), (Hosts{"n1", "n2", "n2", "n3"}));
  EXPECT_EQ(Expand("b1,a1"), (Hosts{"b1", "a1"}));
}

TEST(SlurmNodeListTest, SeveralGroupsExpandInSlurmsOrder) {
  EXPECT_EQ(Expand("a[1-2]b[3-4]"), (Hosts{"a1b3", "a1b4", "a2b3", "a2b4"}));
  EXPECT_EQ(Expand("rack[1-2]-node[01-02]"),
            (Hosts{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}));
  EXPECT_EQ(Expand("n[1-2]a[3]"), (Hosts{"n1a3", "n2a3"}));
  // Three groups: the middle one outermost, then the first, the last fastest (as scontrol).
  EXPECT_EQ(Expand("a[1-2]b[3-4]c[5-6]"), (Hosts{"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5",
                                                 "a1b4c6", "a2b4c5", "a2b4c6"}));
}

TEST(SlurmNodeListTest, SeparatorsAndWhitespace) {
  EXPECT_EQ(Expand("n1, n2\tn3"), (Hosts{"n1", "n2", "n3"}));
  EXPECT_EQ(Expand(",,n1,,"), (Hosts{"n1"}));
  EXPECT_EQ(Expand("  node[1-2]  "), (Hosts{"node1", "node2"}));
}

TEST(SlurmNodeListTest, AsManyHostsAsSlurmAllows) {
  EXPECT_EQ(Expand("n[1-65536]").size(), kMaxSlurmHosts);
  EXPECT_EQ(ErrorOf("n[0-65536]"),
            "Slurm host list 'n[0-65536]': range '0-65536' at character 3 takes the list over "
            "65536 hosts");
  EXPECT_EQ(ErrorOf("a[1-300]b[1-300]"),
            "Slurm host list 'a[1-300]b[1-300]': the entry at character 1 takes the list over "
            "65536 hosts");
}

TEST(SlurmNodeListTest, EmptyListsAreRefused) {
  EXPECT_EQ(ErrorOf(""),
            "Slurm host list '' names no host; expected names such as "
            "node1,node[2-4]");
  EXPECT_EQ(ErrorOf(" , "),
            "Slurm host list ' , ' names no host; expected names such as "
            "node1,node[2-4]");
}

TEST(SlurmNodeListTest, BadRangesAreRefusedWithTheirPosition) {
  EXPECT_EQ(ErrorOf("n[5-3]"),
            "Slurm host list 'n[5-3]': range '5-3' at character 3 goes down; write it as 3-5");
  EXPECT_EQ(ErrorOf("ok1,n[1-2,5-3]"),
            "Slurm host list 'ok1,n[1-2,5-3]': range '5-3' at character 11 goes down; write it "
            "as 3-5");
  EXPECT_EQ(ErrorOf("n[]"),
            "Slurm host list 'n[]': empty range at character 3; write a number "
            "or a range such as 1-4");
  EXPECT_EQ(ErrorOf("n[1,,2]"),
            "Slurm host list 'n[1,,2]': empty range at character 5; write "
            "a number or a range such as 1-4");
  const std::string kNotARange =
      " is not a number or a range such as 1-4 (decimal digits only; Slurm ranges have no step)";
  EXPECT_EQ(ErrorOf("n[1-10:2]"),
            "Slurm host list 'n[1-10:2]': '1-10:2' at character 3" + kNotARange);
  EXPECT_EQ(ErrorOf("n[a-b]"), "Slurm host list 'n[a-b]': 'a-b' at character 3" + kNotARange);
  EXPECT_EQ(ErrorOf("n[-1]"), "Slurm host list 'n[-1]': '-1' at character 3" + kNotARange);
  EXPECT_EQ(ErrorOf("n[1-]"), "Slurm host list 'n[1-]': '1-' at character 3" + kNotARange);
  EXPECT_EQ(ErrorOf("n[1--3]"), "Slurm host list 'n[1--3]': '1--3' at character 3" + kNotARange);
  EXPECT_EQ(ErrorOf("bgl[000x133]"),
            "Slurm host list 'bgl[000x133]': '000x133' at character 5" + kNotARange);
  EXPECT_EQ(ErrorOf("n[1, 3]"), "Slurm host list 'n[1, 3]': ' 3' at character 5" + kNotARange);
}

TEST(SlurmNodeListTest, UnbalancedBracketsAreRefused) {
  EXPECT_EQ(ErrorOf("n[1-2"), "Slurm host list 'n[1-2': '[' at character 2 is not closed by ']'");
  EXPECT_EQ(ErrorOf("n[1-2,m3"),
            "Slurm host list 'n[1-2,m3': '[' at character 2 is not closed by ']'");
  EXPECT_EQ(ErrorOf("n1]"), "Slurm host list 'n1]': ']' at character 3 has no '['");
  EXPECT_EQ(ErrorOf("n[1-2]]"), "Slurm host list 'n[1-2]]': ']' at character 7 has no '['");
  EXPECT_EQ(ErrorOf("n[[1-2]]"),
            "Slurm host list 'n[[1-2]]': '[' at character 3 is inside "
            "another '[...]'; Slurm ranges do not nest");
}

TEST(SlurmNodeListTest, TextAfterTheLastRangeIsRefusedAsBySlurm) {
  EXPECT_EQ(ErrorOf("n[1-2]x"),
            "Slurm host list 'n[1-2]x': 'x' at character 7 follows the last ']'; a Slurm host "
            "name ends with its last range (node[1-2], not node[1-2]x)");
  EXPECT_EQ(ErrorOf("gpu1,n[1-2].ib"),
            "Slurm host list 'gpu1,n[1-2].ib': '.ib' at character 12 follows the last ']'; a "
            "Slurm host name ends with its last range (node[1-2], not node[1-2].ib)");
}

// Slurm itself, where installed: `scontrol show hostnames LIST` needs only a slurm.conf to read.
class ScontrolReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v scontrol > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "scontrol is not installed (Debian package slurm-client)";
    }
    const std::string config = std::string(DPL_TEST_BINARY_DIR) + "/reference-slurm.conf";
    std::ofstream(config) << "ClusterName=reference\nSlurmctldHost=localhost\n"
                             "NodeName=localhost CPUs=1 State=UNKNOWN\n"
                             "PartitionName=debug Nodes=localhost Default=YES\n";
    setenv("SLURM_CONF", config.c_str(), 1);
  }
  void TearDown() override { unsetenv("SLURM_CONF"); }

  // scontrol's hosts, or nothing when it refuses the list.
  static std::optional<Hosts> Scontrol(const std::string& list) {
    const std::string command = "scontrol show hostnames '" + list + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return std::nullopt;
    std::string output;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) output.append(buffer, n);
    pclose(pipe);
    if (output.find("Invalid hostlist") != std::string::npos) return std::nullopt;
    Hosts hosts;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) hosts.push_back(line);
    return hosts;
  }
};

TEST_F(ScontrolReference, SameHostsAsSlurm) {
  for (const char* list :
       {"node1", "node[1-3]", "gpu[01-04,07],cpu3", "a[1-2]b[3-4]", "a[1-2]b[3-4]c[5-6]",
        "rack[1-2]-node[01-02]", "n[08-10]", "n[1-010]", "n[001-3]", "n[3,1-2]", "n[1-2],n[2-3]",
        "a.b-c[1-2]", "n1, n2\tn3", "n[1-2]a[3]", "x[1-2]y[3-4]z[5-6]w[7-8]"}) {
    const std::optional<Hosts> slurm = Scontrol(list);
    ASSERT_TRUE(slurm.has_value()) << "scontrol refused " << list;
    EXPECT_EQ(Expand(list), *slurm) << list;
  }
}

TEST_F(ScontrolReference, RefusedAsBySlurm) {
  for (const char* list : {"n[5-3]", "n[1-10:2]", "n[]", "n[1-2]x", "n[[1-2]]", "n[a-b]", "n[-1]",
                           "n[1x2]", "a.b-c[1-2].d", "n[0-70000]"}) {
    EXPECT_FALSE(Scontrol(list).has_value()) << "scontrol accepted " << list;
    EXPECT_FALSE(ExpandSlurmNodeList(list).ok()) << list;
  }
}

}  // namespace
}  // namespace dpl::cluster
