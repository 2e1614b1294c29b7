// DeepSpeed hostfiles: the format DeepSpeed's launcher reads, and each refusal with its file and
// line.
#include "cluster/hostfile.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace dpl::cluster {
namespace {

std::vector<std::pair<std::string, int>> Pairs(const std::vector<HostSlots>& hosts) {
  std::vector<std::pair<std::string, int>> pairs;
  for (const HostSlots& host : hosts) pairs.emplace_back(host.host, host.slots);
  return pairs;
}

std::string ErrorOf(const std::string& text) {
  auto hosts = ParseHostfile(text, "hosts.txt");
  EXPECT_FALSE(hosts.ok()) << text;
  EXPECT_EQ(hosts.status().code(), DPL_ERR_INVALID_ARGUMENT);
  return hosts.status().message();
}

TEST(HostfileTest, DeepSpeedFormatInFileOrder) {
  auto hosts = ParseHostfile(
      "# two GPU boxes and a CPU one\n"
      "worker-1 slots=8\n"
      "\n"
      "   worker-0\tslots=4   # the older box\n"
      "10.0.0.7 slots=1\r\n"
      "  # indented comment\n",
      "hosts.txt");
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  EXPECT_EQ(Pairs(*hosts), (std::vector<std::pair<std::string, int>>{
                               {"worker-1", 8}, {"worker-0", 4}, {"10.0.0.7", 1}}));
}

TEST(HostfileTest, BadLinesNameTheFileAndLine) {
  EXPECT_EQ(ErrorOf("a slots=1\nworker-1\n"),
            "hostfile 'hosts.txt', line 2: 'worker-1' has no slots; write 'worker-1 slots=N' with "
            "N its processes");
  EXPECT_EQ(ErrorOf("worker-1 slots=0\n"),
            "hostfile 'hosts.txt', line 1: slots of 'worker-1' must be a whole number from 1 to "
            "1048576 (got '0')");
  EXPECT_EQ(ErrorOf("worker-1 slots=4x\n"),
            "hostfile 'hosts.txt', line 1: slots of 'worker-1' must be a whole number from 1 to "
            "1048576 (got '4x')");
  EXPECT_EQ(ErrorOf("worker-1 slots=\n"),
            "hostfile 'hosts.txt', line 1: slots of 'worker-1' must be a whole number from 1 to "
            "1048576 (got '')");
  EXPECT_EQ(ErrorOf("worker-1 gpus=4\n"),
            "hostfile 'hosts.txt', line 1: expected 'HOST slots=N', got 'gpus=4' after "
            "'worker-1'");
  EXPECT_EQ(ErrorOf("worker-1 slots = 4\n"),
            "hostfile 'hosts.txt', line 1: expected 'HOST slots=N', got 'slots' after 'worker-1'");
  EXPECT_EQ(ErrorOf("worker-1 slots=4 max_slots=8\n"),
            "hostfile 'hosts.txt', line 1: unexpected 'max_slots=8' after 'slots=4'; a comment "
            "starts with '#'");
}

TEST(HostfileTest, DuplicateHostsAreRefused) {
  EXPECT_EQ(ErrorOf("# x\nworker-0 slots=2\nworker-1 slots=2\nworker-0 slots=2\n"),
            "hostfile 'hosts.txt', line 4: 'worker-0' is listed again (first on line 2); give "
            "each host once, with all its slots");
}

TEST(HostfileTest, FilesWithoutHostsAreRefused) {
  const std::string kNoHost =
      "hostfile 'hosts.txt' lists no host; expected lines such as 'worker-0 slots=4'";
  EXPECT_EQ(ErrorOf(""), kNoHost);
  EXPECT_EQ(ErrorOf("# only a comment\n\n   \n"), kNoHost);
}

TEST(HostfileTest, ReadsARealFile) {
  const std::string path = std::string(DPL_TEST_BINARY_DIR) + "/hostfile_test_hosts";
  std::ofstream(path) << "node-a slots=2\nnode-b slots=3";  // no newline at the end
  auto hosts = ReadHostfile(path);
  ASSERT_TRUE(hosts.ok()) << hosts.status().message();
  EXPECT_EQ(Pairs(*hosts),
            (std::vector<std::pair<std::string, int>>{{"node-a", 2}, {"node-b", 3}}));
  std::ofstream(path) << "node-a slots=2\nnode-a slots=3\n";
  EXPECT_EQ(ReadHostfile(path).status().message(),
            "hostfile '" + path +
                "', line 2: 'node-a' is listed again (first on line 1); give "
                "each host once, with all its slots");
}

TEST(HostfileTest, MissingFileIsAnIoError) {
  auto hosts = ReadHostfile("/nonexistent/dpl/hostfile");
  ASSERT_FALSE(hosts.ok());
  EXPECT_EQ(hosts.status().code(), DPL_ERR_IO);
  EXPECT_EQ(hosts.status().message(),
            "cannot read hostfile '/nonexistent/dpl/hostfile': No such file or directory");
}

}  // namespace
}  // namespace dpl::cluster
