// The dataset plugins' shared file helpers (datasets/common/files.hpp), linked directly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/files.hpp"

namespace dpl::datasets {
namespace {

namespace fs = std::filesystem;

// Threads of one process that write the same cache entry at once (four opens of a shard set
// indexing the same shard) each leave a whole file under the name, never a mix or a cut one: the
// file under the name is always one writer's, and no temporary file is left behind.
TEST(WriteFileAtomically, ThreadsWritingOneNameAtOnceLeaveOneWholeFile) {
  const fs::path folder = fs::path(::testing::TempDir()) / "dpl_write_atomically_test";
  fs::remove_all(folder);
  const std::string path = (folder / "entry.index").string();
  constexpr int kWriters = 6;
  std::vector<std::string> contents;
  for (int w = 0; w < kWriters; ++w) {
    contents.emplace_back(size_t(1 << 20) + size_t(w) * 4099, char('a' + w));
  }
  for (int round = 0; round < 20; ++round) {
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        const std::string& mine = contents[size_t(w)];
        EXPECT_NO_THROW(
            WriteFileAtomically(path, mine.data(), 16, mine.data() + 16, mine.size() - 16));
      });
    }
    for (std::thread& writer : writers) writer.join();
    std::ifstream in(path, std::ios::binary);
    const std::string written((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    bool whole = false;
    for (const std::string& content : contents) whole = whole || written == content;
    ASSERT_TRUE(whole) << "round " << round << ": " << written.size()
                       << " bytes under the name, not one writer's whole file";
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator{}), 1)
      << "a temporary file was left in " << folder;
  fs::remove_all(folder);
}

}  // namespace
}  // namespace dpl::datasets
